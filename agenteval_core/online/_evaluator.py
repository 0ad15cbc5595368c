"""Online evaluation: capture every finished trace, score it in the background, raise alerts.

Shaped like an OpenTelemetry span processor: the agent's side only hands over (never blocks,
never raises); the evaluator's :class:`~agenteval_core.Recorder` assembles traces on one
thread; a background asyncio loop in another daemon thread scores them through the
:class:`~agenteval_core.Engine`; ``flush`` and ``close`` take deadlines; an exit hook flushes
with a time bound.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import os
import signal
import tempfile
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import CaptureError, ErrorKind, describe_os_error
from .._fork import renew_after_fork
from .._redact import Redactor
from .._sync import time_left
from ..engine._engine import (
    DEFAULT_SESSION_METRICS,
    MAX_OPEN_SESSIONS,
    Engine,
    default_trace_metric_names,
)
from ..engine._sinks import CallbackSink, LoggingSink, ResultsFileSink, Sink, close_sink
from ..metrics._loops import LoopGuard, ToolCallLoops
from ..metrics._protocol import Metric, SessionMetric
from ..schema._capture import CaptureWriter, skipping_bad_lines
from ..schema._results import MetricResult, TraceResults
from ..schema._trace import LoopAlert, Trace
from ._recorder import Recorder

__all__ = [
    "DEFAULT_CAPTURE",
    "DEFAULT_REDACTOR",
    "MAX_LISTED_IDS",
    "EvaluatorStats",
    "OnlineEvaluator",
    "default_evaluator",
]

logger = logging.getLogger("agenteval")
DEFAULT_REDACTOR = Redactor()
"""Redacts common credential shapes and secret-named fields, and cuts strings over 100,000
characters; pass ``redactor=Redactor(patterns=..., fields=..., max_chars=...)`` to extend it
or ``redactor=None`` to keep traces as they are."""


DEFAULT_CAPTURE = "agenteval-capture.jsonl"
"""The capture file of an evaluator given none, in the working directory (or, where that
cannot be written, in the system's temporary directory)."""

MAX_LISTED_IDS = 10_000
"""How many ids ``stats.unscored_trace_ids`` and ``stats.uncaptured_trace_ids`` list at most
(their counts are exact; the results file marks every unscored trace)."""


@dataclass
class EvaluatorStats:
    """Counts of what the evaluator did; nothing is dropped silently.

    Every ``submitted`` trace is either ``captured`` or counted in ``capture_errors`` (a
    failed write, e.g. a full disk, or a trace finished after ``close``; the first 10,000
    ids in ``uncaptured_trace_ids``), and
    either ``scored``, ``dropped_from_scoring`` (the first 10,000 ids in
    ``unscored_trace_ids``; replay the capture to score them) or still queued. After
    ``close``: ``submitted == captured + capture_errors == scored + dropped_from_scoring``
    (with ``capture=None``, ``captured`` stays 0).
    """

    submitted: int = 0
    captured: int = 0
    capture_errors: int = 0
    scored: int = 0
    dropped_from_scoring: int = 0
    judge_not_sampled: int = 0
    alerts: int = 0
    callback_errors: int = 0
    metric_errors: int = 0
    sessions_cut: int = 0
    """How many times a session closed to keep at most ``max_open_sessions`` open met
    another trace: its session metrics were then given for each part (logged at WARNING
    the first time)."""
    problems: dict[str, int] = field(default_factory=dict)
    """Failures of agenteval's own that it kept from the agent, by kind: ``loop guard`` (a
    guard that failed cannot stop a loop), ``submit`` (a trace neither captured nor
    scored), ``sink`` (a sink that failed to take an unscored mark). Each kind is logged
    at WARNING the first time."""
    unscored_trace_ids: list[str] = field(default_factory=list)
    uncaptured_trace_ids: list[str] = field(default_factory=list)


class _Bookkeeping(Sink):
    """The evaluator's own sink: counts, and the cross-trace loop alert."""

    wants_session_snapshots = False

    def __init__(self, evaluator: OnlineEvaluator) -> None:
        self.evaluator = evaluator
        self._said: set[str] = set()  # the kinds of failed results logged (once each)

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        evaluator = self.evaluator
        evaluator.stats.scored += 1
        cut = evaluator.engine.sessions_cut
        if cut and not evaluator.stats.sessions_cut:
            logger.warning(
                "agenteval: a session was cut in two: more than %d sessions were open at "
                "once, so the least recently active closed, and one of them met another "
                "trace; its session metrics are given for each part (stats.sessions_cut "
                "counts these times); raise OnlineEvaluator(max_open_sessions=...) above "
                "the sessions active at once",
                evaluator.engine.max_open_sessions,
            )
        evaluator.stats.sessions_cut = cut
        failed = [r for r in results.results if r.status == "error"]
        evaluator.stats.metric_errors += len(failed)
        for result in failed:
            self._say_first(trace, result)
        for result in results.results:
            if result.name == "loop_detection" and result.success is False:
                evaluator.recorder.deliver_alert(
                    LoopAlert(
                        session_id=trace.session_id,
                        trace_id=trace.id,
                        pattern="loop_detection",
                        count=len(result.metadata.get("comparisons", [])),
                        message=f"output repeats earlier outputs of the session "
                        f"(loop_detection {result.score:.2f} < {result.threshold})",
                    )
                )

    def _say_first(self, trace: Trace, result: MetricResult) -> None:
        """Log the first failed result of each kind at WARNING: a judge that cannot be
        reached or refuses every request (a wrong URL, key or model) fails each judged
        trace, and a service would otherwise never say so. A metric's own bug is logged
        with its traceback where it raised."""
        kind = str(result.metadata.get("error_kind") or ErrorKind.METRIC_ERROR)
        if kind == ErrorKind.METRIC_ERROR or kind in self._said:
            return
        self._said.add(kind)
        logger.warning(
            "agenteval: %s could not score trace %s: %s; later results that fail this way "
            "(%s) are counted in stats.metric_errors, not logged",
            result.name,
            trace.id,
            result.error,
            kind,
        )


class OnlineEvaluator:
    """Captures and scores finished traces in the background while the agent runs.

    For each finished trace, in order: redact it, append it to the capture file (before
    anything else, so nothing captured is lost), hand it to the scoring loop, score it with
    the :class:`~agenteval_core.Engine` (trace metrics, then the session's metrics), and
    deliver the results to the sinks. Loop alerts go to the sinks and ``on_alert``.

    Args:
        capture: the capture file (JSON Lines, appended); ``None`` captures nothing.
        capture_shards: write the capture as a directory of this many files, each session
            in one (``CaptureWriter(capture, shards=N)``; the default capture is then the
            directory ``agenteval-capture``): what workers and Ray read in parallel.
        metrics: trace metrics, names or instances (default: deterministic and embedding
            metrics, and judge metrics when a judge is given).
        session_metrics: default agent_reliability and agent_consistency.
        judge: given to the judge metrics only. ``judge_sample_rate`` of traces are judged.
        embedder: given to the embedding metrics only.
        sinks: more sinks (``ConsoleSink()``, an OpenTelemetry sink, your own).
        on_result: called as ``on_result(trace, results)`` for each scored trace.
        on_alert: called with each :class:`LoopAlert`, on the recorder's thread.
        results_path: a results file (the format ``agenteval replay --json`` writes).
        loop_repeat_threshold: how many identical calls in one run make a loop, for the
            alerts and the guard of every adapter attached to this evaluator, and for the
            ``tool_call_loops`` metric named in ``metrics``.
        loop_cycle_repeats: how many times a short sequence of calls (A→B→A→B) repeats
            before it is a loop, for the same (a polling agent's check → wait needs more).
        queue_size: traces waiting for scoring at most; past that a finished trace is still
            captured but not scored, and counted (``stats.dropped_from_scoring``).
        batch_size, batch_delay: the scoring loop waits up to ``batch_delay`` seconds for up
            to ``batch_size`` traces, so metrics can batch their work.
        concurrency: traces scored at once (default: the judge's bound, or 8).
        max_open_sessions: sessions kept open at once; past that the least recently active
            close (their final results go to the sinks), so memory stays flat. A session
            closed so that meets another trace is cut in two (``stats.sessions_cut``).
        session_idle_timeout: seconds without a new trace after which a session closes
            (its final results go to the sinks), so a long-running service reports its
            finished conversations while it runs; ``None`` (the default): sessions close
            at :meth:`end_session`, past ``max_open_sessions``, or at ``close()``. A later
            trace with the same id starts a new session.
        exit_timeout: seconds the exit hook waits for scoring at interpreter exit.
        close_on_sigterm: on SIGTERM (which by default ends the process without exit
            hooks), close every evaluator within its ``exit_timeout`` first, then end the
            process the default way. Set on the main thread, and only where SIGTERM has no
            handler of the program's. The handler itself takes no lock; the closing runs on
            a thread of its own.
        redactor: applied before a trace is captured, scored or sent anywhere.

    Alerts are logged at WARNING on the ``agenteval`` logger, and scores at INFO on
    ``agenteval.results`` (the logging sink); pass ``log=False`` to leave logging out.
    """

    def __init__(
        self,
        *,
        capture: str | os.PathLike[str] | None = DEFAULT_CAPTURE,
        capture_shards: int | None = None,
        metrics: Sequence[str | Metric] | None = None,
        session_metrics: Sequence[str | SessionMetric] | None = None,
        judge: Any = None,
        embedder: Any = None,
        judge_sample_rate: float = 1.0,
        sinks: Sequence[Sink] = (),
        on_result: Callable[[Trace, TraceResults], Any] | None = None,
        on_alert: Callable[[LoopAlert], Any] | None = None,
        results_path: str | os.PathLike[str] | None = None,
        loop_repeat_threshold: int = 3,
        loop_cycle_repeats: int = 2,
        queue_size: int = 1000,
        batch_size: int = 64,
        batch_delay: float = 0.2,
        concurrency: int | None = None,
        max_open_sessions: int = MAX_OPEN_SESSIONS,
        session_idle_timeout: float | None = None,
        exit_timeout: float = 5.0,
        close_on_sigterm: bool = False,
        seed: int | None = 0,
        redactor: Redactor | None = DEFAULT_REDACTOR,
        log: bool = True,
    ) -> None:
        names: list[str | Metric | SessionMetric] = list(
            metrics
            if metrics is not None
            else default_trace_metric_names(with_judge=judge is not None)
        )
        names += list(session_metrics if session_metrics is not None else DEFAULT_SESSION_METRICS)
        guard = LoopGuard(repeat_threshold=loop_repeat_threshold, cycle_repeats=loop_cycle_repeats)
        # the metric named here counts loops as the guard does: a run the guard let through
        # is no loop in its score
        names = [
            ToolCallLoops.like(guard) if item == ToolCallLoops.name else item for item in names
        ]
        self.stats = EvaluatorStats()
        all_sinks: list[Sink] = [_Bookkeeping(self)]
        if log:
            all_sinks.append(LoggingSink())
        if results_path is not None:
            all_sinks.append(ResultsFileSink(results_path, append=True))
        if on_result is not None or on_alert is not None:
            all_sinks.append(CallbackSink(on_result, on_alert=on_alert))
        all_sinks += sinks
        all_sinks.append(_Done(self))  # last: a trace is done once every sink has it
        self.engine = Engine(
            names,
            judge=judge,
            embedder=embedder,
            sinks=all_sinks,
            concurrency=concurrency,
            judge_sample_rate=judge_sample_rate,
            seed=seed,
            max_open_sessions=max_open_sessions,
        )
        if session_idle_timeout is not None and not session_idle_timeout > 0:
            raise ValueError(
                f"session_idle_timeout must be a number of seconds > 0 (or None), got "
                f"{session_idle_timeout!r}"
            )
        self.session_idle_timeout = session_idle_timeout
        self.capture_path, self._capture = _open_capture(capture, capture_shards)
        self.results_path = Path(results_path) if results_path is not None else None
        self.redactor = redactor
        for sink in all_sinks:
            sink.attached(self.capture_path, self.results_path)
            sink.redacted_by(redactor)
        self._problems_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self.recorder = Recorder(
            on_trace=self.submit,
            on_alert=self._deliver_alert,
            on_problem=self.problem,
            guard=guard,
        )
        self.exit_timeout = exit_timeout
        self.queue_size = queue_size
        self.batch_size = batch_size
        self.batch_delay = batch_delay
        # ids handed to scoring and not yet scored, and the session ends handed over with them
        self._in_scoring: dict[str | _SessionEnd, None] = {}
        self._ends_in_recorder = 0  # session ends on their way through the recorder
        self._failing_writes = 0  # capture writes failed in a row (logged at the first)
        self._said_late_trace = False  # a trace submitted after close was logged
        self._said_flush_in_callback = False
        self._idle = threading.Condition()
        self._closed = False
        self._hurry = threading.Event()
        self._start_loop()
        _live_evaluators.add(self)
        renew_after_fork(self)
        if close_on_sigterm:
            _close_on_sigterm()

    def _after_fork(self) -> None:
        """The child has none of the parent's threads: a fresh scoring loop and locks, with
        nothing pending (the parent scores its own)."""
        if self._closed:
            return
        self._in_scoring = {}
        self._ends_in_recorder = 0
        self._idle = threading.Condition()
        self._problems_lock = threading.Lock()
        self._close_lock = threading.Lock()
        # the parent's scoring task, pending for ever here: freed, asyncio would print "Task
        # was destroyed but it is pending!" at some collection in every forked worker
        _left_by_parents.append(self._consumer)
        self._start_loop()

    def _start_loop(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._queue: asyncio.Queue[Trace | _SessionEnd] | None = None
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run_loop, args=(ready,), name="agenteval-evaluator", daemon=True
        )
        self._thread.start()
        ready.wait()

    @property
    def sinks(self) -> list[Sink]:
        """Every sink results go to (the evaluator's own bookkeeping first)."""
        return self.engine.sinks

    @property
    def guard(self) -> LoopGuard:
        """The loop guard every adapter attached to this evaluator asks."""
        return self.recorder.guard

    def add_sink(self, sink: Sink) -> None:
        """Send results and alerts to one more sink from now on."""
        sink.attached(self.capture_path, self.results_path)
        sink.redacted_by(self.redactor)
        self.engine.sinks.insert(len(self.engine.sinks) - 1, sink)

    # --- the agent's side: never blocks, never raises ------------------------------------

    def submit(self, trace: Trace) -> None:
        """Capture a finished trace now and hand it to scoring. Never blocks or raises.

        The hand-off is bounded here, on the caller's thread: with ``queue_size`` traces
        already waiting, the trace is captured but not scored, and counted.
        """
        if self._ends_in_recorder and not self.recorder.pump.runs_here():
            # a session's end waits in the recorder: this trace, submitted after it, goes
            # the same way, so it never joins the session that ended before it came
            self.recorder.put_after_drains((self._submit_event, trace))
            return
        try:
            self.stats.submitted += 1
            if self.redactor is not None:
                trace = self.redactor.trace(trace)  # before it is written, scored or sent
            if self._capture is not None:
                if self._capture.closed:
                    self._after_close(trace.id)
                else:
                    self._write_capture(trace)
            with self._idle:
                full = self._closed or len(self._in_scoring) >= self.queue_size
                if not full:
                    self._in_scoring[trace.id] = None
            if full:
                self._unscored(trace.id, f"the scoring hand-off was full ({self.queue_size})")
                return
            self._loop.call_soon_threadsafe(self._enqueue, trace)
        except Exception as exc:  # e.g. the loop is already closed at interpreter exit
            self.problem("submit", exc, "a trace was neither captured nor scored")

    def _submit_event(self, event: tuple[Any, Trace]) -> None:
        self.submit(event[1])

    def end_session(self, session_id: str) -> None:
        """Say a session is over (the user closed the conversation): once its runs recorded
        so far are captured and scored, it closes and its final results go to the sinks
        (``session_scored``; the results file's session line). A run recorded later with
        the same id starts a new session. Never blocks or raises; a ``flush`` afterwards
        waits for the close."""
        # in order with the runs' events: a run that returned just before has its trace
        # handed over first, even if the recorder has not assembled it yet, or its
        # framework (CrewAI's event bus) has not yet delivered its last events
        with self._idle:
            self._ends_in_recorder += 1
        self.recorder.put_after_drains((self._hand_over_end, session_id))

    def _hand_over_end(self, event: tuple[Any, str]) -> None:
        """On the recorder's thread, after the events before the end: hand it to scoring."""
        end = _SessionEnd(event[1])
        try:
            with self._idle:
                self._ends_in_recorder -= 1
                if self._closed:  # close() has closed every session already
                    return
                self._in_scoring[end] = None
            self._loop.call_soon_threadsafe(self._enqueue, end)
        except Exception as exc:
            self._done(end)
            self.problem("end_session", exc, f"session {event[1]!r} stays open until close")

    def _write_capture(self, trace: Trace) -> None:
        """Append a trace to the capture; a failure (a full disk) is counted, said once per
        run of failures, and never keeps the trace from scoring."""
        assert self._capture is not None
        try:
            self._capture.write(trace)
        except Exception as exc:
            self._uncaptured(trace.id)
            self._failing_writes += 1
            if self._failing_writes == 1:
                logger.error(
                    "agenteval could not capture trace %s: %s: %s; it is still scored, and "
                    "later failures are counted in stats.capture_errors until a write succeeds",
                    trace.id,
                    type(exc).__name__,
                    exc,
                )
            return
        self.stats.captured += 1
        if self._failing_writes:
            logger.warning(
                "agenteval: capture to %s works again after %d failed write(s)",
                self.capture_path,
                self._failing_writes,
            )
            self._failing_writes = 0

    def _uncaptured(self, trace_id: str) -> None:
        self.stats.capture_errors += 1
        if len(self.stats.uncaptured_trace_ids) < MAX_LISTED_IDS:
            self.stats.uncaptured_trace_ids.append(trace_id)

    def _after_close(self, trace_id: str) -> None:
        """A trace finished after ``close`` (an agent thread still running at exit): its
        capture is closed, so it is counted as not captured, and below as not scored."""
        self._uncaptured(trace_id)
        if not self._said_late_trace:
            self._said_late_trace = True
            logger.warning(
                "agenteval: trace %s finished after the evaluator was closed: neither "
                "captured nor scored (counted, with any later ones, in stats.capture_errors "
                "and stats.dropped_from_scoring); close the evaluator after the agent's last "
                "run",
                trace_id,
            )

    def problem(self, kind: str, exc: BaseException, consequence: str) -> None:
        """Count a failure of agenteval's own that was kept from the agent, and say it at
        WARNING the first time of its kind (never on every event of a busy agent)."""
        with self._problems_lock:
            count = self.stats.problems.get(kind, 0) + 1
            self.stats.problems[kind] = count
        if count == 1:
            logger.warning(
                "agenteval: %s failed (%s: %s): %s; counted in stats.problems[%r], logged once",
                kind,
                type(exc).__name__,
                exc,
                consequence,
                kind,
            )

    def _unscored(self, trace_id: str, reason: str) -> None:
        self.stats.dropped_from_scoring += 1
        if len(self.stats.unscored_trace_ids) < MAX_LISTED_IDS:
            self.stats.unscored_trace_ids.append(trace_id)
        for sink in self.engine.sinks:  # the results file marks it, for a later replay
            try:
                sink.trace_unscored(trace_id, reason)
            except Exception as exc:
                sink.errors += 1
                self.problem("sink", exc, f"{sink!r} did not take an unscored mark")

    def _deliver_alert(self, alert: LoopAlert) -> None:
        """Runs on the recorder's thread: every alert reaches the sinks from there."""
        self.stats.alerts += 1
        for sink in self.engine.sinks:
            try:
                sink.alert(alert)
            except Exception as exc:
                sink.errors += 1
                logger.warning("agenteval sink %r failed on an alert: %s", sink, exc)

    # --- the background loop --------------------------------------------------------------

    def _run_loop(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._queue = asyncio.Queue()  # bounded by submit, on the caller's thread
        self._consumer = self._loop.create_task(self._consume())  # held: a task needs a reference
        ready.set()
        self._loop.run_forever()
        # scoring that close() gave up on (counted there) is cancelled, not left pending
        left = asyncio.all_tasks(self._loop)
        for task in left:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        self._loop.close()

    def _enqueue(self, item: Trace | _SessionEnd) -> None:
        assert self._queue is not None
        self._queue.put_nowait(item)

    async def _batches(self) -> AsyncIterator[list[Trace]]:
        """The next trace, plus whatever else arrives within ``batch_delay`` (or until a
        flush asks for hurry), up to ``batch_size``: scoring in batches lets metrics batch
        their work, and keeps scoring from competing with a busy agent on every trace.

        A session's end ends the batch: the engine reads the batch (each trace joins its
        session) before the next one is asked for, and only then the session ends, so it
        holds exactly the traces submitted before :meth:`end_session`."""
        assert self._queue is not None
        while True:
            first = await self._next_item()
            if isinstance(first, _SessionEnd):
                self._end(first)
                continue
            batch, end = [first], None
            deadline = time.monotonic() + self.batch_delay
            while len(batch) < self.batch_size and not self._hurry.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self._queue.get(), min(remaining, 0.01))
                except TimeoutError:
                    continue
                if isinstance(item, _SessionEnd):
                    end = item
                    break
                batch.append(item)
            yield batch
            if end is not None:
                self._end(end)
            self._close_idle_sessions()

    async def _next_item(self) -> Trace | _SessionEnd:
        """The next item handed over; with an idle timeout, idle sessions close while
        nothing arrives."""
        assert self._queue is not None
        if self.session_idle_timeout is None:
            return await self._queue.get()
        while True:
            try:  # a session idle past the timeout closes within a quarter of it more
                return await asyncio.wait_for(
                    self._queue.get(), min(self.session_idle_timeout / 4, 60.0)
                )
            except TimeoutError:
                self._close_idle_sessions()

    def _close_idle_sessions(self) -> None:
        if self.session_idle_timeout is not None:
            self.engine.close_idle(self.session_idle_timeout)

    def _end(self, end: _SessionEnd) -> None:
        # done once the session has closed: a flush after end_session waits for its close
        self.engine.end_session(end.session_id, then=functools.partial(self._done, end))

    async def _consume(self) -> None:
        while True:
            try:
                await self.engine.stream(self._batches())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let the loop die with traces queued
                logger.warning("agenteval scoring failed: %s", exc, exc_info=exc)

    def _done(self, handed_over: str | _SessionEnd) -> None:
        with self._idle:
            self._in_scoring.pop(handed_over, None)
            if not self._in_scoring:
                self._hurry.clear()
            self._idle.notify_all()  # a flush waits for the traces handed over before it

    # --- lifecycle ------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event recorded and every trace handed over so far is captured
        and scored; False on timeout. Traces that arrive meanwhile are not waited for: a
        busy agent never keeps a flush (or ``close``) waiting. Called from a callback of the
        evaluator's (``on_result``, ``on_alert``, a sink), it returns False at once: what it
        would wait for needs the thread the callback runs on."""
        if self._on_own_thread():
            if not self._said_flush_in_callback:
                self._said_flush_in_callback = True
                logger.warning(
                    "agenteval: flush() was called from a callback on the evaluator's own "
                    "thread, where it cannot wait for scoring; it returned False. Flush "
                    "from your own code"
                )
            return False
        remaining = time_left(timeout)
        if not self.recorder.flush(remaining()):
            return False
        with self._idle:
            waiting = list(self._in_scoring)  # in hand-off order, as they are mostly scored
            if not waiting:
                return True
            self._hurry.set()
            position = 0

            def scored() -> bool:
                nonlocal position
                while position < len(waiting) and waiting[position] not in self._in_scoring:
                    position += 1
                return position == len(waiting)

            return self._idle.wait_for(scored, remaining())

    def captured(self, timeout: float = 20.0) -> list[Trace]:
        """The traces this evaluator captured, in the order they were written (a capture
        directory's shard by shard, each session's in order), read back from its capture
        once everything recorded so far is captured (waiting up to ``timeout``): the way to
        get a run's ``Trace`` in a test, or in a suite's agent function. What other writers
        append to the same file (evaluators of other attempts run at once, other processes,
        earlier runs) is left out: ``read_capture(path)`` reads the whole file.

        Raises:
            ValueError: the evaluator captures nothing (``capture=None``).
            TimeoutError: what was recorded was not handled within ``timeout``.
        """
        if self._capture is None:
            raise ValueError("this evaluator has no capture file: give it capture=PATH")
        if not self.flush(timeout):
            raise TimeoutError(f"agenteval: the recorded runs were not captured in {timeout} s")
        with skipping_bad_lines() as skipped:
            return list(self._capture.read_written(on_error=skipped.append))

    def _on_own_thread(self) -> bool:
        """Whether the caller is a callback on the scoring loop's thread or the recorder's."""
        return threading.current_thread() is self._thread or self.recorder.pump.runs_here()

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout``), close every session (their results go to the sinks),
        then stop the threads and close the files and sinks.

        Safe to call twice. Traces not scored by then are counted in
        ``stats.dropped_from_scoring`` and listed in ``stats.unscored_trace_ids`` (so
        ``submitted == scored + dropped_from_scoring`` after close), and a warning says so;
        a trace finished after close is neither captured nor scored, counted in
        ``stats.capture_errors`` and ``stats.dropped_from_scoring``, and said once.
        A close from another thread meanwhile (the exit hook, SIGTERM) waits for this one.
        Called from a callback of the evaluator's (``on_result``, ``on_alert``, a sink), it
        starts the close on a thread of its own and returns.
        """
        if self._closed:
            return
        if self._on_own_thread():
            # from a callback of ours (on_result, on_alert, a sink): closing waits for the
            # thread it would run on, so it runs on a thread of its own, from now
            threading.Thread(
                target=self.close, args=(timeout,), name="agenteval-close", daemon=True
            ).start()
            return
        if not self._close_lock.acquire(timeout=-1 if timeout is None else timeout):
            return  # another thread is closing it and took longer than ``timeout``
        try:
            if not self._closed:
                self._close(timeout)
        finally:
            self._close_lock.release()

    def _close(self, timeout: float | None) -> None:
        remaining = time_left(timeout)  # one deadline for the whole close

        self.flush(remaining())
        self.recorder.close(remaining())
        self.flush(remaining())  # the runs the recorder finished as they stood, if any
        with self._idle:
            self._closed = True
        sessions_closed = asyncio.run_coroutine_threadsafe(_close_sessions(self.engine), self._loop)
        try:
            sessions_closed.result(remaining())
        except TimeoutError:
            logger.warning(
                "agenteval: the open sessions were not closed within close(timeout=%s); "
                "their final session results were not delivered",
                timeout,
            )
        except Exception as exc:
            logger.warning(
                "agenteval could not close the sessions: %s: %s", type(exc).__name__, exc
            )
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(remaining())
        with self._idle:
            leftover = [key for key in self._in_scoring if isinstance(key, str)]
            self._in_scoring = {}  # a session end left over: close() closed every session
        for trace_id in leftover:  # captured, not scored in time: counted, never silent
            self._unscored(trace_id, "not scored before the evaluator closed")
        if leftover:
            replay = (
                f"`agenteval replay {self.capture_path}` scores them"
                if self.capture_path is not None
                else "nothing was captured to replay them from (capture=None)"
            )
            logger.warning(
                "agenteval: %d trace(s) were not scored before close; their ids are in "
                "stats.unscored_trace_ids, and %s",
                len(leftover),
                replay,
            )
        if self._capture is not None:
            left = remaining()
            self._capture.close(5.0 if left is None else left)
        for sink in self.engine.sinks:
            try:
                close_sink(sink, remaining())
            except Exception as exc:
                logger.warning("agenteval could not close sink %r: %s", sink, exc)
        self.stats.callback_errors = sum(sink.errors for sink in self.engine.sinks)
        _live_evaluators.discard(self)

    def __enter__(self) -> OnlineEvaluator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _open_capture(
    capture: str | os.PathLike[str] | None, shards: int | None
) -> tuple[Path | None, CaptureWriter | None]:
    """The capture's path and writer. The default location falls back to the temporary
    directory when the working directory cannot be written (a read-only container root),
    and to no capture, with one WARNING, when neither can: an evaluator made on the agent's
    behalf never raises into it. A path the user chose that cannot be written is an error."""
    if capture is None:
        return None, None
    default = os.fspath(capture) == DEFAULT_CAPTURE
    path = Path(DEFAULT_CAPTURE).with_suffix("") if default and shards else Path(capture)
    try:
        return path, CaptureWriter(path, shards=shards)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if not default:
            raise CaptureError(
                f"cannot write the capture file: {describe_os_error(exc, path)}; pass "
                "capture= a path in a writable directory, or capture=None to capture nothing"
            ) from None
    fallback = Path(tempfile.gettempdir()) / "agenteval" / path.name
    try:
        writer = CaptureWriter(fallback, shards=shards)
    except OSError as exc:
        logger.warning(
            "agenteval: cannot write %s (%s) nor %s (%s); capturing nothing (runs are still "
            "scored). Pass OnlineEvaluator(capture=PATH) a writable path",
            path.absolute(),
            reason,
            fallback,
            exc.strerror or exc,
        )
        return None, None
    logger.warning(
        "agenteval: cannot write %s (%s); capturing to %s instead. Pass "
        "OnlineEvaluator(capture=PATH) to choose",
        path.absolute(),
        reason,
        fallback,
    )
    return fallback, writer


class _SessionEnd:
    """A session's end, handed to scoring in order with the traces (each one distinct)."""

    __slots__ = ("session_id",)

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id


class _Done(Sink):
    wants_session_snapshots = False

    def __init__(self, evaluator: OnlineEvaluator) -> None:
        self.evaluator = evaluator

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        self.evaluator.stats.judge_not_sampled = self.evaluator.engine.judge_not_sampled
        self.evaluator.stats.callback_errors = sum(s.errors for s in self.evaluator.engine.sinks)
        self.evaluator._done(trace.id)


async def _close_sessions(engine: Engine) -> None:
    engine.close_all()


_live_evaluators: weakref.WeakSet[OnlineEvaluator] = weakref.WeakSet()
_left_by_parents: list[asyncio.Task[None]] = []
_default: OnlineEvaluator | None = None
_default_lock = threading.Lock()


def default_evaluator() -> OnlineEvaluator:
    """The process-wide evaluator adapters use when none is given (capture in the cwd)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = OnlineEvaluator()
        return _default


class _SigtermCloser:
    """Closes every evaluator on SIGTERM, whose default action ends the process without
    running exit hooks, then lets SIGTERM end it the default way.

    The handler runs on the main thread between two of its instructions, maybe while that
    thread holds a lock ``close()`` needs, so it takes none: it restores the default action
    (a second SIGTERM ends the process at once) and writes a byte to a pipe. A daemon thread
    waiting on the pipe does the closing, while the main thread goes on and releases what
    it holds, then sends SIGTERM again.
    """

    def __init__(self) -> None:
        self._start()
        renew_after_fork(self)

    def _start(self) -> None:
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        thread = threading.Thread(target=self._close_all, name="agenteval-sigterm", daemon=True)
        thread.start()

    def handle(self, signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with contextlib.suppress(OSError):  # a full pipe: the thread is already woken
            os.write(self._wake_write, b"\0")

    def _close_all(self) -> None:
        try:
            os.read(self._wake_read, 1)
        except OSError:
            return
        _flush_at_exit()
        os.kill(os.getpid(), signal.SIGTERM)

    def _after_fork(self) -> None:
        # the child's handler must wake the child's own thread, not the parent's
        os.close(self._wake_read)
        os.close(self._wake_write)
        self._start()


_sigterm_closer: _SigtermCloser | None = None


def _close_on_sigterm() -> None:
    """Install the :class:`_SigtermCloser` handler (``OnlineEvaluator(close_on_sigterm=True)``)
    when SIGTERM still has its default action; a handler of the program's is left alone.
    SIGINT needs nothing: its KeyboardInterrupt runs the exit hook."""
    global _sigterm_closer
    if threading.current_thread() is not threading.main_thread():
        logger.warning(
            "agenteval: close_on_sigterm=True was ignored: a SIGTERM handler can only be set "
            "on the main thread; make the evaluator there, or close it from your own handler"
        )
        return
    try:
        current = signal.getsignal(signal.SIGTERM)
        if _sigterm_closer is not None and current == _sigterm_closer.handle:
            return
        if current is not signal.SIG_DFL:
            logger.info("agenteval: SIGTERM has a handler of the program's; left in place")
            return
        if _sigterm_closer is None:
            _sigterm_closer = _SigtermCloser()
        signal.signal(signal.SIGTERM, _sigterm_closer.handle)
    except (ValueError, OSError) as exc:  # not settable here (embedded interpreters)
        logger.warning("agenteval: could not handle SIGTERM here: %s", exc)


@atexit.register
def _flush_at_exit() -> None:
    for evaluator in list(_live_evaluators):
        try:
            evaluator.close(evaluator.exit_timeout)
        except Exception as exc:
            logger.debug("agenteval exit flush failed: %s", exc)
