"""The one scoring engine: online scoring, replay, EvalSuite and the pytest helpers use it.

It resolves metrics and their options once (a judge and an embedder go only to the metrics
that take them), always awaits, runs blocking metrics on worker threads, keeps each session's
history and session metrics, and hands every result to its sinks.

Order is kept only where it is needed. A trace's history (the earlier traces of its session)
is fixed when the trace is read, so the traces of one session, a long conversation included,
are measured concurrently like those of different sessions; their results are folded into
the session metrics, and delivered, in input order.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import random
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import MetricInputError
from .._sync import close_on_this_loop, run_sync
from ..metrics._protocol import Metric, MetricKind, Score, SessionAccumulator, SessionMetric
from ..metrics._registry import create_metric, list_metrics, metric_class
from ..schema._results import REPEAT_OF, MetricResult, TraceResults
from ..schema._trace import EvalCase, RecentRuns, RunStatus, Trace, read_again
from ._history import SessionHistory, turns_as_history
from ._sinks import Sink

__all__ = [
    "DEFAULT_SESSION_METRICS",
    "MAX_OPEN_SESSIONS",
    "Engine",
    "default_metric_names",
    "default_trace_metric_names",
    "resolve_metrics",
]

logger = logging.getLogger("agenteval")
MAX_OPEN_SESSIONS = 1024
"""Sessions an engine keeps open by default (see :class:`Engine`'s ``max_open_sessions``)."""
CLOSED_EARLY_KEPT = 65_536
"""Ids of sessions closed past ``max_open_sessions`` that an engine remembers (a few MB),
to count a session cut in two when it comes back."""
RUN_COMPLETED = "run_completed"
"""The session signal the engine adds for a run that did not complete (0.0: risk 1); a run
paused for a human (``interrupted``) is control flow and gets none."""
DEFAULT_SESSION_METRICS = ("agent_reliability", "agent_consistency")
DEFAULT_CONCURRENCY = 8
"""Traces scored at once when no judge sets the pace (a judge's own bound is used if it has one)."""


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


def _accepts(cls: type, option: str) -> bool:
    return option in inspect.signature(cls).parameters


def resolve_metrics(
    names: Sequence[str | Metric | SessionMetric] | None,
    *,
    judge: Any = None,
    embedder: Any = None,
    **options: Any,
) -> tuple[list[Metric], list[SessionMetric]]:
    """Build metrics from registry names (or take instances), split into trace and session
    metrics.

    ``judge`` and ``embedder`` go to the metrics built by name whose constructor takes them,
    and to no other; ``options`` go to every metric built by name. A judge metric left without
    a judge is refused (:class:`MetricInputError`). With ``names=None``: the default metrics
    (with the judge metrics when a judge is given).
    """
    trace_metrics: list[Metric] = []
    session_metrics: list[SessionMetric] = []
    for item in names if names is not None else default_metric_names(with_judge=judge is not None):
        if isinstance(item, str):
            cls = metric_class(item)
            given = dict(options)
            for option, value in (("judge", judge), ("embedder", embedder)):
                if value is not None and _accepts(cls, option):
                    given[option] = value
            item = create_metric(item, **given)
        takes_judge = getattr(item, "kind", None) is MetricKind.JUDGE and hasattr(item, "judge")
        if takes_judge and item.judge is None:  # type: ignore[union-attr]
            # it would skip every trace, and only --json would say why: say so before the run
            raise MetricInputError(
                f"{item.name} needs a judge: pass judge=OpenAIJudge(...) (from the command "
                "line: --judge-model), or leave the metric out"
            )
        if isinstance(item, SessionMetric):
            session_metrics.append(item)
        elif isinstance(item, Metric):
            trace_metrics.append(item)
        else:
            raise MetricInputError(
                f"not a metric: {item!r}; give registry names (see `agenteval metrics`) "
                "or Metric instances"
            )
    return trace_metrics, session_metrics


@dataclass
class _SessionState:
    history: SessionHistory
    accumulators: dict[str, SessionAccumulator]
    unfolded: int = 0
    """Traces read whose results are not folded in yet: such a session is never evicted."""
    undelivered: int = 0
    """Traces read whose results have not gone to the sinks yet: a session closing now
    waits for them, so its closing results always come after its traces'."""
    last_read: float = 0.0
    """When its latest trace was read (``time.monotonic()``): what an idle timeout measures."""
    read: dict[str, int] = field(default_factory=dict)
    """The traces read for it, for :func:`~agenteval_core.schema._trace.read_again`: a
    trace read again, the same run under the same id, is a repeat (see
    :attr:`Engine.repeated_traces`)."""


@dataclass
class _Admitted:
    """A trace as it was read: its session, the history it sees, its place in the judge
    sample. Fixed in input order, so the results do not depend on which trace finishes first."""

    case: EvalCase
    state: _SessionState | None
    history: Sequence[Trace]
    sampled: bool
    repeat: bool = False
    """A run read already (see :attr:`Engine.repeated_traces`): scored by no metric, kept
    out of its session's history and signals."""


def checked_open_sessions_limit(value: int) -> int:
    """``value`` as a ``max_open_sessions``; ``ValueError`` unless a whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_open_sessions must be a whole number >= 1, got {value!r}")
    return value


class Engine:
    """Scores traces and cases with one set of metrics, however they arrive.

    Args:
        metrics: registry names or instances, trace and session metrics mixed (default: the
            default metrics, see :func:`default_metric_names`).
        judge: given to the metrics built by name that take a judge, and only those.
        embedder: given to the metrics built by name that take an embedder.
        sinks: receive every trace's results and every closed session's results.
        concurrency: traces measured at once (default: the judge's ``max_concurrency``, or 8),
            traces of one session included: each sees the history known when it was read,
            and results are folded into the session metrics and delivered in input order.
        judge_sample_rate: the share of traces the judge metrics score, drawn in input order
            (with ``seed``); on the others each judge metric gives a skipped result that says
            the trace was not in the sample.
        max_open_sessions: sessions kept open; past that the least recently active ones are
            closed when the batch that opened more is scored (their results go to the
            sinks), so memory stays flat. A session closed so that meets another trace is
            cut in two, and each part's session metrics cover that part alone:
            :attr:`sessions_cut` counts those times.
        skip_repeats: score a run read again (the same run under the same id) once: see
            :attr:`repeated_traces`. A suite, whose attempts can be the same run (a
            deterministic agent), scores each.
        options: given to every metric built by name (e.g. ``threshold=0.7``).
    """

    def __init__(
        self,
        metrics: Sequence[str | Metric | SessionMetric] | None = None,
        *,
        judge: Any = None,
        embedder: Any = None,
        sinks: Iterable[Sink] = (),
        concurrency: int | None = None,
        judge_sample_rate: float = 1.0,
        seed: int | None = 0,
        history_window: int | None = None,
        max_open_sessions: int = MAX_OPEN_SESSIONS,
        skip_repeats: bool = True,
        **options: Any,
    ) -> None:
        self.metrics, self.session_metrics = resolve_metrics(
            metrics, judge=judge, embedder=embedder, **options
        )
        self.judge = judge
        self.sinks: list[Sink] = list(sinks)
        # a session's running results after each trace cost a pass over its signals; they are
        # computed when a sink reads them, or when there are no sinks (the caller reads them)
        self._snapshots = not self.sinks or any(s.wants_session_snapshots for s in self.sinks)
        self._scores = any(s.wants_session_scores for s in self.sinks)
        if concurrency is None:
            traffic = getattr(judge, "traffic", None)
            concurrency = getattr(traffic, "max_concurrency", None) or DEFAULT_CONCURRENCY
        if concurrency < 1:
            raise MetricInputError(f"concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self._judged = [m for m in self.metrics if m.kind is MetricKind.JUDGE]
        # judges and blocking metrics wait on I/O or threads: only they gain from running
        # traces concurrently; without them, scoring in order avoids a task per trace
        self._overlapping = [m for m in self.metrics if m in self._judged or m.blocking]
        # scored a batch at a time, a metric with its own batch code does its batch work there;
        # preparing it as well would do that work twice (a remote embedder: twice the calls)
        self._unbatched = [
            m for m in self.metrics if type(m).ameasure_batch is Metric.ameasure_batch
        ]
        if not 0.0 <= judge_sample_rate <= 1.0:
            raise MetricInputError(f"judge_sample_rate must be in [0, 1], got {judge_sample_rate}")
        self.judge_sample_rate = judge_sample_rate
        self.judge_not_sampled = 0
        self._sampler = random.Random(seed)
        readers = [m for m in self.metrics if m.uses_history]
        windows = [int(getattr(m, "window", 3)) for m in readers]
        self.history_window = (
            history_window if history_window is not None else max(windows, default=0)
        )
        # whole traces when any reader needs them, else only the fields the readers name
        named = [m.history_fields for m in readers if m.history_fields is not None]
        self.history_fields: frozenset[str] | None = (
            frozenset().union(*named) if len(named) == len(readers) else None
        )
        self.max_open_sessions = checked_open_sessions_limit(max_open_sessions)
        self._sessions: OrderedDict[str, _SessionState] = OrderedDict()
        self._closed_early: OrderedDict[str, None] = OrderedDict()
        """The last :data:`CLOSED_EARLY_KEPT` sessions closed past ``max_open_sessions``
        (their ids alone), to tell when one is cut in two: a service that runs for weeks
        closes sessions so for ever, and memory must stay flat."""
        self.skip_repeats = skip_repeats
        self._sessionless = RecentRuns()  # the latest runs read with no session
        self.repeated_traces = 0
        """Traces read again in their session, or soon after with no session (the same run
        under the same id: a capture line written or shipped twice, a file read twice):
        each repeat's results are skipped results that say so, and it is kept out of its
        session's history and metrics, so it neither counts twice nor reads as the agent
        repeating itself (a loop to loop_detection)."""
        self.sessions_cut = 0
        """How many times a session closed past ``max_open_sessions`` met another trace of
        its own: it was cut in two, and its session metrics were given for each part. A
        session that comes back after :data:`CLOSED_EARLY_KEPT` others were closed so is
        not counted."""
        self._closing: dict[int, tuple[str, _SessionState, Callable[[], None] | None]] = {}
        """Sessions closed (ended, evicted) while their last traces' results were still on
        their way to the sinks, by the ``id`` of their state: each closes once they are
        delivered (then what the closer asked to be called). A trace of the same id read
        meanwhile opens a new session."""
        self._reading: dict[int, _SessionState] = {}
        """The session of each case read and not yet delivered, by the case's ``id``."""
        self._tails: dict[str, asyncio.Task[tuple[EvalCase, TraceResults]]] = {}
        self._slots: asyncio.Semaphore | None = None

    # --- scoring ---------------------------------------------------------------------------

    async def score(self, items: Sequence[EvalCase | Trace]) -> list[TraceResults]:
        """Score a batch (traces measured concurrently, folded into their sessions in input
        order); results in input order. Every result also goes to the sinks. Never raises
        for a metric's failure."""
        await self.prepare(items)
        outcomes = []
        for task in self.schedule(items):
            outcomes.append(self._deliver(await task))
        return outcomes

    async def stream(
        self, batches: AsyncIterable[Sequence[EvalCase | Trace]] | Iterable[Sequence[Any]]
    ) -> int:
        """Score batches as they come, keeping up to ``concurrency`` × 4 traces in flight
        across batch boundaries (so a slow judge never waits for a batch to drain). Returns
        how many traces were scored; results go to the sinks, in input order."""
        delivered = 0
        if not self._overlapping:
            # nothing waits on I/O: each metric takes the whole batch in one call
            async for batch in _aiter(batches):
                cases = [EvalCase.of(item) for item in batch]
                for metric in self._unbatched:
                    await metric.aprepare(cases)
                for scored in await self._score_guarded(cases):
                    self._deliver(scored)
                delivered += len(cases)
                # nothing above waits, so this is where a cancellation (Ctrl-C) lands
                await asyncio.sleep(0)
            return delivered
        window = self.concurrency * 4
        pending: deque[asyncio.Task[tuple[EvalCase, TraceResults]]] = deque()

        def deliver_ready(_: object = None) -> None:
            # as soon as the oldest trace is scored, it and every scored trace behind it go
            # to the sinks (in input order), without waiting for more input
            nonlocal delivered
            while pending and pending[0].done():
                if pending[0].cancelled():  # the loop is shutting down (a close that timed
                    return  # out): the traces left are counted unscored by the evaluator
                self._deliver(pending.popleft().result())
                delivered += 1

        async for batch in _aiter(batches):
            cases = [EvalCase.of(item) for item in batch]
            await self.prepare(cases)
            for task in self.schedule(cases):
                pending.append(task)
                task.add_done_callback(deliver_ready)
                while len(pending) > window:
                    await asyncio.wait([pending[0]])
                    deliver_ready()
        while pending:
            await asyncio.wait([pending[0]])
            deliver_ready()
        return delivered

    def _deliver(self, scored: tuple[EvalCase, TraceResults]) -> TraceResults:
        """Hand a trace's results to the sinks; results are delivered in input order. The
        session it closed meanwhile, if this was its last trace, closes after it."""
        case, outcome = scored
        if case.trace is not None:
            for sink in self.sinks:
                _deliver(sink.trace_scored, case.trace, outcome)
        state = self._reading.pop(id(case), None)
        if state is not None:
            state.undelivered -= 1
            if not state.undelivered and (closing := self._closing.pop(id(state), None)):
                session_id, closed, then = closing
                self._finish(session_id, closed, then)
        return outcome

    async def prepare(self, items: Sequence[EvalCase | Trace]) -> None:
        """Let metrics batch their costly work (e.g. one embedding call for a whole batch)."""
        cases = [EvalCase.of(item) for item in items]
        for metric in self.metrics:
            await metric.aprepare(cases)

    def schedule(
        self, items: Sequence[EvalCase | Trace]
    ) -> list[asyncio.Task[tuple[EvalCase, TraceResults]]]:
        """Start scoring each item. Every item is measured as soon as a slot is free; a
        trace's results are folded into its session after those of the session's previous
        trace."""
        tasks = []
        for admitted in self._admit([EvalCase.of(item) for item in items]):
            trace = admitted.case.trace
            session_id = trace.session_id if trace is not None else None
            previous = self._tails.get(session_id) if session_id else None
            task = asyncio.ensure_future(self._score_one(admitted, previous))
            if session_id:
                self._tails[session_id] = task
                task.add_done_callback(functools.partial(self._release, session_id))
            tasks.append(task)
        return tasks

    def _release(self, session_id: str, task: asyncio.Task[tuple[EvalCase, TraceResults]]) -> None:
        if self._tails.get(session_id) is task:
            del self._tails[session_id]

    async def _score_one(
        self, admitted: _Admitted, previous: asyncio.Task[tuple[EvalCase, TraceResults]] | None
    ) -> tuple[EvalCase, TraceResults]:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.concurrency)
        async with self._slots:
            (results,) = await self._measure_guarded([admitted])
        if previous is not None:  # the slot is free again while this waits its turn
            await asyncio.wait([previous])
        scored = self._fold(admitted, results)
        self._evict()
        return scored

    async def _score_guarded(
        self, cases: Sequence[EvalCase]
    ) -> list[tuple[EvalCase, TraceResults]]:
        """Score cases in input order. Each case sees the earlier traces of its session,
        those earlier in ``cases`` included; every metric scores all the cases in one call."""
        admitted = self._admit(cases)
        rows = await self._measure_guarded(admitted)
        scored = [self._fold(one, results) for one, results in zip(admitted, rows, strict=True)]
        self._evict()
        return scored

    async def _measure_guarded(self, admitted: Sequence[_Admitted]) -> list[list[MetricResult]]:
        """:meth:`_measure_rows`, or no results for each case if scoring itself broke."""
        try:
            return await self._measure_rows(admitted)
        except Exception as exc:  # metrics never raise; this is a bug of ours
            logger.error(
                "agenteval could not score %d traces: %s", len(admitted), exc, exc_info=exc
            )
            return [[] for _ in admitted]

    def _admit(self, cases: Sequence[EvalCase]) -> list[_Admitted]:
        """Read cases in input order: each joins its session's history (seeing the traces
        before it) and draws its place in the judge sample; a repeat of a run read already
        does neither."""
        draw = bool(self._judged) and self.judge_sample_rate < 1.0
        admitted = []
        for case in cases:
            trace = case.trace
            state = None
            history: Sequence[Trace] = ()
            repeat = False
            if trace is not None and trace.session_id:
                state = self._state(trace.session_id)
                state.last_read = time.monotonic()
                repeat = self.skip_repeats and read_again(state.read, trace)
                if not repeat:
                    history = state.history.frozen()
                    state.history.append(trace)
                state.unfolded += 1
                state.undelivered += 1
                self._reading[id(case)] = state
            elif trace is not None and self.skip_repeats:
                repeat = read_again(self._sessionless, trace)
            if not history and case.conversation and self.history_window:
                history = turns_as_history(case.conversation)
            self.repeated_traces += repeat
            sampled = not repeat and (not draw or self._sampler.random() < self.judge_sample_rate)
            if not sampled and not repeat:
                self.judge_not_sampled += 1
            admitted.append(_Admitted(case, state, history, sampled, repeat))
        return admitted

    def _fold(
        self, admitted: _Admitted, results: list[MetricResult]
    ) -> tuple[EvalCase, TraceResults]:
        """A trace's results, folded into its session's metrics (in input order)."""
        case, state, trace = admitted.case, admitted.state, admitted.case.trace
        session_results: list[MetricResult] = []
        session_scores: dict[str, float | None] = {}
        if state is not None and trace is not None:
            state.unfolded -= 1
            if not admitted.repeat:  # the session as it was: the trace once
                self._add_signals(state, trace, results)
            if self._snapshots:
                session_results = [
                    acc.snapshot(trace.session_id) for acc in state.accumulators.values()
                ]
                session_scores = {r.name: r.score for r in session_results}
            elif self._scores:  # the numbers alone cost a fraction of whole results
                session_scores = {name: acc.score() for name, acc in state.accumulators.items()}
        return case, TraceResults(
            trace_id=trace.id if trace is not None else None,
            case_id=case.id,
            session_id=trace.session_id if trace is not None else None,
            results=results,
            session_results=session_results,
            session_scores=session_scores,
        )

    def _evict(self) -> None:
        """Close the least recently active sessions past ``max_open_sessions``; a session
        with traces still being measured stays open (closing it would lose their signals)."""
        excess = len(self._sessions) - self.max_open_sessions
        if excess <= 0:
            return
        closing: list[str] = []
        for session_id, state in self._sessions.items():
            if len(closing) == excess:
                break
            if not state.unfolded:
                closing.append(session_id)
        for session_id in closing:
            self._close_after_delivery(session_id)
        self._closed_early.update(dict.fromkeys(closing))
        while len(self._closed_early) > CLOSED_EARLY_KEPT:
            self._closed_early.popitem(last=False)

    async def _measure_rows(self, admitted: Sequence[_Admitted]) -> list[list[MetricResult]]:
        """Every metric's results for each admitted case, one row per case. A case the judge
        sample leaves out gets a skipped result from each judge metric that says so; an
        ``unfinished`` run (its end unseen) a skipped result from every metric."""
        skipped = [_not_scored(one) for one in admitted]
        if any(skipped):
            scored = [one for one, skip in zip(admitted, skipped, strict=True) if skip is None]
            rows = iter(await self._measure_rows(scored))
            return [
                next(rows)
                if skip is None
                else [metric._case_result(skip, 0.0, one.case) for metric in self.metrics]
                for one, skip in zip(admitted, skipped, strict=True)
            ]
        cases = [one.case for one in admitted]
        histories = [one.history for one in admitted]
        chosen = [index for index, one in enumerate(admitted) if one.sampled]
        left_out = Score.skip(
            f"not in the judge sample (judge_sample_rate={self.judge_sample_rate:g})",
            judge_sample_rate=self.judge_sample_rate,
        )

        async def column(metric: Metric) -> list[MetricResult]:
            if metric not in self._judged or len(chosen) == len(cases):
                return list(await _measure_batch(metric, cases, histories))
            measured = iter(
                await _measure_batch(
                    metric, [cases[i] for i in chosen], [histories[i] for i in chosen]
                )
                if chosen
                else []
            )
            return [
                next(measured) if one.sampled else metric._case_result(left_out, 0.0, one.case)
                for one in admitted
            ]

        overlapping = [m for m in self.metrics if m in self._overlapping]
        measured = (
            dict(
                zip(
                    overlapping,
                    await asyncio.gather(*(column(m) for m in overlapping)),
                    strict=True,
                )
            )
            if overlapping
            else {}
        )
        # the others finish without waiting on anything: awaited in turn, no task each
        columns = [measured[m] if m in measured else await column(m) for m in self.metrics]
        return [[column[index] for column in columns] for index in range(len(cases))]

    # --- sessions --------------------------------------------------------------------------

    def _state(self, session_id: str) -> _SessionState:
        state = self._sessions.get(session_id)
        if state is not None:
            self._sessions.move_to_end(session_id)
            return state
        if session_id in self._closed_early:
            del self._closed_early[session_id]
            self.sessions_cut += 1
        state = _SessionState(
            SessionHistory(self.history_window, self.history_fields),
            {m.name: m.incremental() for m in self.session_metrics},
        )
        self._sessions[session_id] = state
        return state

    def _add_signals(
        self, state: _SessionState, trace: Trace, results: Sequence[MetricResult]
    ) -> None:
        scores = {r.name: r.score for r in results if r.score is not None}
        if trace.incomplete:  # a failed run is a signal of its own (risk 1); a pause is not
            scores[RUN_COMPLETED] = 0.0
        for metric in self.session_metrics:
            signals = {name: scores[name] for name in metric.signal_names if name in scores}
            state.accumulators[metric.name].update(trace.id, signals)

    def session_results(self, session_id: str) -> list[MetricResult]:
        """The session metrics of one open session as they stand now."""
        state = self._sessions.get(session_id)
        if state is None:
            return []
        return [acc.result(session_id) for acc in state.accumulators.values()]

    def close_session(self, session_id: str) -> list[MetricResult]:
        """Finish a session: its final results go to the sinks and are returned."""
        state = self._sessions.pop(session_id, None)
        return self._finish(session_id, state) if state is not None else []

    def _finish(
        self, session_id: str, state: _SessionState, then: Callable[[], None] | None = None
    ) -> list[MetricResult]:
        results = [acc.result(session_id) for acc in state.accumulators.values()]
        if results:
            for sink in self.sinks:
                _deliver(sink.session_scored, session_id, results)
        if then is not None:
            then()
        return results

    def end_session(self, session_id: str, then: Callable[[], None] | None = None) -> None:
        """End a session its application says is over (a conversation closed): it closes,
        its final results to the sinks, once the results of the traces read for it so far
        have gone to them, and ``then`` is called (at once when no such session is open).
        A trace of the same id read after this starts a new session."""
        if session_id in self._sessions:
            self._close_after_delivery(session_id, then)
        elif then is not None:
            then()

    def _close_after_delivery(
        self, session_id: str, then: Callable[[], None] | None = None
    ) -> None:
        """Close an open session now, or, when results of its traces are still on their
        way (folding into it, then to the sinks), once they are delivered; a trace of the
        same id read meanwhile opens a new session."""
        state = self._sessions.pop(session_id)
        if state.undelivered:
            self._closing[id(state)] = (session_id, state, then)
        else:
            self._finish(session_id, state, then)

    def close_idle(self, idle_for: float) -> list[str]:
        """Close the sessions no trace was read for in the last ``idle_for`` seconds (one
        with traces still being measured stays open); their ids, least recently active
        first. A trace of the same id read later starts a new session."""
        cutoff = time.monotonic() - idle_for
        idle = []
        for session_id, state in self._sessions.items():  # least recently active first
            if state.last_read > cutoff:
                break
            if not state.unfolded:
                idle.append(session_id)
        for session_id in idle:
            self._close_after_delivery(session_id)
        return idle

    def close_all(self) -> None:
        """Close every open session, least recently active first, and the closed ones whose
        last traces' results were not delivered (scoring stopped before they were)."""
        for session_id, state, then in list(self._closing.values()):
            self._finish(session_id, state, then)
        self._closing.clear()
        self._reading.clear()
        for session_id in list(self._sessions):
            self.close_session(session_id)

    async def aclose(self) -> None:
        """Close the connections the judges (the engine's and its judge metrics') opened on
        this event loop. A run's own loop (``replay``, ``Suite.run``) ends with the run, and
        a keep-alive socket left open would outlive it until collected. Never raises; a
        judge used again opens new ones."""
        await close_on_this_loop(self._judges())

    def _judges(self) -> list[Any]:
        return [self.judge, *(getattr(metric, "judge", None) for metric in self._judged)]

    # --- sync driver -----------------------------------------------------------------------

    def score_sync(self, items: Sequence[EvalCase | Trace]) -> list[TraceResults]:
        """:meth:`score` from synchronous code (also from inside a running event loop)."""
        return run_sync(self.score(items), closing=self._judges())


async def _measure_batch(
    metric: Metric, cases: Sequence[EvalCase], histories: Sequence[Sequence[Trace]]
) -> list[MetricResult]:
    started = time.perf_counter()
    try:
        if metric.blocking:
            results = await asyncio.to_thread(metric.measure_batch, cases, histories)
        else:
            results = await metric.ameasure_batch(cases, histories)
        if len(results) != len(cases):
            raise RuntimeError(
                f"measure_batch returned {len(results)} results for {len(cases)} cases"
            )
        for result in results:
            if not isinstance(result, MetricResult):
                raise TypeError(
                    f"measure_batch returned a {type(result).__name__}, not a MetricResult"
                )
        return results
    except Exception as exc:  # a metric's own batch code broke: each case says so
        failure = Score.from_exception(exc)
        share = (time.perf_counter() - started) * 1000.0 / len(cases)
        return [metric._case_result(failure, share, case) for case in cases]


def _deliver(method: Any, *args: Any) -> None:
    try:
        method(*args)
    except Exception as exc:  # a sink never stops scoring or the other sinks
        owner = getattr(method, "__self__", None)
        errors = 1
        if owner is not None:
            owner.errors = errors = owner.errors + 1
        if errors == 1:  # a full disk fails every write: say it once, count the rest
            logger.warning(
                "agenteval sink %r failed: %s: %s (its later failures are counted in its "
                "errors, not logged)",
                owner,
                type(exc).__name__,
                exc,
            )


async def _aiter(batches: Any) -> Any:
    if hasattr(batches, "__aiter__"):
        async for batch in batches:
            yield batch
    else:
        for batch in batches:
            yield batch


def _not_scored(admitted: _Admitted) -> Score | None:
    """The skipped result every metric gives a trace it does not score: a repeat of a trace
    its session already read (see :attr:`Engine.repeated_traces`), or a run whose end
    agenteval did not see (status ``unfinished``): what it would have scored is unknown,
    and a failure would be a guess."""
    trace = admitted.case.trace
    if admitted.repeat and trace is not None:
        where = f"in session {trace.session_id}" if trace.session_id else "with no session"
        return Score.skip(
            f"not scored: a repeat of trace {trace.id}, already read {where} (a capture "
            "line written or shipped twice)",
            **{REPEAT_OF: trace.id},
        )
    if trace is None or trace.status is not RunStatus.UNFINISHED:
        return None
    return Score.skip(
        f"not scored: how the run ended was not recorded ({trace.status_reason or 'unfinished'})",
        status=RunStatus.UNFINISHED.value,
    )
