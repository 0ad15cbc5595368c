"""Online evaluation: capture every finished trace, score it in the background, raise alerts.

Shaped like a span processor: the agent's side only hands over (never blocks, never raises);
a background asyncio loop in a daemon thread does the scoring; ``flush`` and ``close`` take
deadlines; an exit hook flushes with a time bound.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import random
import threading
import time
import weakref
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ._capture import CaptureWriter
from ._metric import Metric, MetricKind, SessionMetric
from ._recorder import EventPump, ToolStart
from ._redact import Redactor
from ._replay import DEFAULT_SESSION_METRICS, default_trace_metric_names, resolve_metrics
from ._results import MetricResult
from ._schema import EvalCase, ToolCall, Trace
from ._scoring import SessionScorer

__all__ = [
    "LiveLoopMonitor",
    "LoopAlert",
    "OnlineEvaluator",
    "TraceResults",
    "default_evaluator",
]

logger = logging.getLogger("agenteval")
DEFAULT_REDACTOR = Redactor()
"""Redacts common credential shapes and secret-named fields, and cuts strings over 100,000
characters; pass ``redactor=Redactor(patterns=..., fields=..., max_chars=...)`` to extend it
or ``redactor=None`` to keep traces as they are."""
results_logger = logging.getLogger("agenteval.results")
"""The logging sink: one INFO line per scored trace (enable it with logging's own config)."""


class LoopAlert(BaseModel):
    """An agent caught repeating itself."""

    session_id: str | None
    trace_id: str
    pattern: Literal["repeated_call", "cycle", "loop_detection"]
    """``repeated_call``: the same tool with the same arguments N times in one run;
    ``cycle``: a short sequence of calls repeated (A→B→A→B); ``loop_detection``: the
    cross-trace metric fell below its threshold."""
    count: int
    """How many times the call (or the cycle) has occurred."""
    calls: list[ToolCall] = Field(default_factory=list)
    message: str
    time: float = Field(default_factory=time.time)
    """When the alert was raised."""
    call_started: float | None = None
    """When the tool call that closed the loop started (live patterns), for latency."""


def canonical_call(call: ToolCall) -> tuple[str, str]:
    """A tool call's identity for loop detection: its name and sorted-key JSON arguments."""
    return call.name, json.dumps(call.arguments, sort_keys=True, default=str)


@dataclass
class _RunCalls:
    signatures: list[tuple[str, str]] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    alerted: set[Any] = field(default_factory=set)


class LiveLoopMonitor:
    """Watches each run's tool calls as they start and alerts on loops.

    ``repeated_call`` fires when a call (same tool, same canonical arguments) reaches
    ``repeat_threshold`` occurrences in one run; ``cycle`` fires when the last
    ``cycle_repeats`` × L calls are one sequence of L ≥ 2 distinct-call steps repeated
    (L ≤ ``max_cycle_length``). Each loop alerts once per run.
    """

    def __init__(
        self,
        *,
        repeat_threshold: int = 3,
        cycle_repeats: int = 2,
        max_cycle_length: int = 3,
        on_alert: Callable[[LoopAlert], None] | None = None,
    ) -> None:
        if repeat_threshold < 2 or cycle_repeats < 2 or max_cycle_length < 2:
            raise ValueError("repeat_threshold, cycle_repeats and max_cycle_length must be >= 2")
        self.repeat_threshold = repeat_threshold
        self.cycle_repeats = cycle_repeats
        self.max_cycle_length = max_cycle_length
        self.on_alert = on_alert
        self._runs: dict[str, _RunCalls] = defaultdict(_RunCalls)
        self._lock = threading.Lock()

    def observe(self, start: ToolStart) -> LoopAlert | None:
        """Record a starting tool call; return (and deliver) an alert if it closes a loop."""
        signature = canonical_call(start.tool_call)
        with self._lock:
            run = self._runs[start.trace_id]
            run.signatures.append(signature)
            run.calls.append(start.tool_call)
            run.counts[signature] += 1
            alert = self._repeat(start, run, signature) or self._cycle(start, run)
        if alert is not None and self.on_alert is not None:
            self.on_alert(alert)
        return alert

    def _repeat(
        self, start: ToolStart, run: _RunCalls, signature: tuple[str, str]
    ) -> LoopAlert | None:
        count = run.counts[signature]
        if count < self.repeat_threshold or signature in run.alerted:
            return None
        run.alerted.add(signature)
        calls = [c for c, s in zip(run.calls, run.signatures, strict=True) if s == signature]
        return LoopAlert(
            session_id=start.session_id,
            trace_id=start.trace_id,
            pattern="repeated_call",
            count=count,
            calls=calls,
            message=f"{signature[0]} called {count} times with the same arguments {signature[1]}",
            time=time.time(),
            call_started=start.time,
        )

    def _cycle(self, start: ToolStart, run: _RunCalls) -> LoopAlert | None:
        signatures = run.signatures
        for length in range(2, self.max_cycle_length + 1):
            span = length * self.cycle_repeats
            if len(signatures) < span:
                break
            tail = signatures[-span:]
            pattern = tail[:length]
            if len(set(pattern)) < length or tail != pattern * self.cycle_repeats:
                continue
            # the same cycle read from another starting point is the same loop
            key = ("cycle", frozenset(pattern))
            if key in run.alerted:
                return None
            run.alerted.add(key)
            names = " → ".join(name for name, _ in pattern)
            return LoopAlert(
                session_id=start.session_id,
                trace_id=start.trace_id,
                pattern="cycle",
                count=self.cycle_repeats,
                calls=run.calls[-span:],
                message=f"cycle {names} repeated {self.cycle_repeats} times",
                time=time.time(),
                call_started=start.time,
            )
        return None

    def forget(self, trace_id: str) -> None:
        """Drop a finished run's state."""
        with self._lock:
            self._runs.pop(trace_id, None)


class TraceResults(BaseModel):
    """What the online evaluator produced for one finished trace."""

    trace_id: str
    session_id: str | None
    results: list[MetricResult]
    session_results: list[MetricResult] = Field(default_factory=list)
    """The session's metrics as they stand after this trace."""


@dataclass
class EvaluatorStats:
    """Counts of what the evaluator did; nothing is dropped silently."""

    submitted: int = 0
    captured: int = 0
    capture_errors: int = 0
    scored: int = 0
    dropped_from_scoring: int = 0
    judge_not_sampled: int = 0
    alerts: int = 0
    callback_errors: int = 0
    metric_errors: int = 0
    unscored_trace_ids: list[str] = field(default_factory=list)


class OnlineEvaluator:
    """Captures and scores finished traces in the background while the agent runs.

    For each submitted trace, in order: append it to the capture file (before anything else,
    so nothing captured is lost); queue it for scoring; on the background loop run the trace
    metrics (deterministic and embedding; judge metrics when a judge is given, sampled by
    ``judge_sample_rate``), update the session's metrics, and deliver a :class:`TraceResults`
    to the callbacks and the results file. Loop alerts go to ``on_alert`` callbacks.

    Scoring runs in batches: the first finished trace waits up to ``batch_delay`` seconds
    for up to ``batch_size`` more (a ``flush`` cuts the wait short).

    Queue policy: the scoring queue holds ``queue_size`` traces; when it is full, a new trace
    is captured but not scored, counted in ``stats.dropped_from_scoring`` and listed in
    ``stats.unscored_trace_ids`` (replay the capture to score it later). The agent never waits.

    Secrets: every trace is redacted (``redactor``) before it is captured, scored or sent to
    a judge; strings over the redactor's ``max_chars`` are cut with a marker giving their size.

    Sinks: ``on_result`` callbacks (add more with ``add_result_callback``), the JSONL
    ``results_path`` file, and the ``agenteval.results`` logger (one INFO line per trace).
    A failing sink is counted in ``stats.callback_errors`` and never stops the others.
    """

    def __init__(
        self,
        *,
        capture: str | os.PathLike[str] | None = "agenteval-capture.jsonl",
        metrics: Sequence[str | Metric] | None = None,
        session_metrics: Sequence[str | SessionMetric] | None = None,
        judge: Any = None,
        judge_sample_rate: float = 1.0,
        on_result: Callable[[TraceResults], None] | None = None,
        on_alert: Callable[[LoopAlert], None] | None = None,
        results_path: str | os.PathLike[str] | None = None,
        loop_repeat_threshold: int = 3,
        queue_size: int = 1000,
        batch_size: int = 64,
        batch_delay: float = 0.2,
        exit_timeout: float = 5.0,
        seed: int | None = 0,
        redactor: Redactor | None = DEFAULT_REDACTOR,
    ) -> None:
        names: list[str | Metric | SessionMetric] = list(
            metrics
            if metrics is not None
            else default_trace_metric_names(with_judge=judge is not None)
        )
        names += list(session_metrics if session_metrics is not None else DEFAULT_SESSION_METRICS)
        trace_metrics, sessions = resolve_metrics(names, judge=judge)
        self._judged = [m for m in trace_metrics if m.kind is MetricKind.JUDGE]
        self._scorer = SessionScorer(trace_metrics, sessions)
        self._sampler = random.Random(seed)
        self.judge_sample_rate = judge_sample_rate
        self.capture_path = Path(capture) if capture is not None else None
        self._capture = CaptureWriter(self.capture_path) if self.capture_path else None
        self._results_file = open(results_path, "a", encoding="utf-8") if results_path else None  # noqa: SIM115
        self._result_callbacks: list[Callable[[TraceResults], None]] = (
            [on_result] if on_result else []
        )
        self._alert_callbacks: list[Callable[[LoopAlert], None]] = [on_alert] if on_alert else []
        self.monitor = LiveLoopMonitor(
            repeat_threshold=loop_repeat_threshold, on_alert=self._deliver_alert
        )
        self.stats = EvaluatorStats()
        self.exit_timeout = exit_timeout
        self.redactor = redactor
        self._pumps: weakref.WeakSet[EventPump] = weakref.WeakSet()
        self._pending = 0
        self._idle = threading.Condition()
        self._closed = False
        self._queue_size = queue_size
        self.batch_size = batch_size
        self.batch_delay = batch_delay
        self._hurry = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._queue: asyncio.Queue[Trace] | None = None
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run_loop, args=(ready,), name="agenteval-evaluator", daemon=True
        )
        self._thread.start()
        ready.wait()
        _live_evaluators.add(self)

    # --- the agent's side: never blocks, never raises ------------------------------------

    def submit(self, trace: Trace) -> None:
        """Capture a finished trace now and queue it for scoring. Never blocks or raises."""
        try:
            self.stats.submitted += 1
            if self.redactor is not None:
                trace = self.redactor.trace(trace)  # before it is written, scored or sent
            if self._capture is not None and not self._capture.closed:
                try:
                    self._capture.write(trace)
                    self.stats.captured += 1
                except Exception as exc:
                    self.stats.capture_errors += 1
                    logger.error("agenteval could not capture trace %s: %s", trace.id, exc)
            if self._closed:
                self._unscored(trace)
                return
            with self._idle:
                self._pending += 1
            self._loop.call_soon_threadsafe(self._enqueue, trace)
        except Exception as exc:  # e.g. the loop is already closed at interpreter exit
            logger.debug("agenteval could not queue trace: %s", exc)

    def observe_tool_start(self, start: ToolStart) -> None:
        """Feed a starting tool call to the live loop monitor (alerts within milliseconds)."""
        try:
            self.monitor.observe(start)
        except Exception as exc:
            logger.warning("agenteval loop monitor failed: %s", exc)

    def report_alert(self, alert: LoopAlert) -> None:
        """Deliver an alert detected elsewhere (e.g. by an adapter's loop guard)."""
        self._deliver_alert(alert)

    def attach(self, pump: EventPump) -> None:
        """Register an adapter's event pump so ``flush`` drains it first."""
        self._pumps.add(pump)

    # --- callbacks and sinks --------------------------------------------------------------

    def add_result_callback(self, callback: Callable[[TraceResults], None]) -> None:
        self._result_callbacks.append(callback)

    def add_alert_callback(self, callback: Callable[[LoopAlert], None]) -> None:
        self._alert_callbacks.append(callback)

    def _call(self, callbacks: Sequence[Callable[[Any], None]], value: Any) -> None:
        for callback in callbacks:
            try:
                callback(value)
            except Exception as exc:
                self.stats.callback_errors += 1
                logger.warning("agenteval callback %r failed: %s", callback, exc)

    def _deliver_alert(self, alert: LoopAlert) -> None:
        self.stats.alerts += 1
        logger.info("agenteval loop alert: %s", alert.message)
        self._call(self._alert_callbacks, alert)

    # --- the background loop --------------------------------------------------------------

    def _run_loop(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._queue = asyncio.Queue(self._queue_size)
        consumer = self._loop.create_task(self._consume())
        ready.set()
        self._loop.run_forever()
        consumer.cancel()
        self._loop.run_until_complete(asyncio.gather(consumer, return_exceptions=True))
        self._loop.close()

    def _enqueue(self, trace: Trace) -> None:
        assert self._queue is not None
        try:
            self._queue.put_nowait(trace)
        except asyncio.QueueFull:
            self._unscored(trace)
            self._done()

    def _unscored(self, trace: Trace) -> None:
        self.stats.dropped_from_scoring += 1
        if len(self.stats.unscored_trace_ids) < 10_000:
            self.stats.unscored_trace_ids.append(trace.id)

    async def _next_batch(self) -> list[Trace]:
        """The next trace, plus whatever else arrives within ``batch_delay`` (or until a
        flush asks for hurry), up to ``batch_size``: scoring in batches lets metrics batch
        their work, and keeps scoring from competing with a busy agent on every trace."""
        assert self._queue is not None
        batch = [await self._queue.get()]
        deadline = time.monotonic() + self.batch_delay
        while len(batch) < self.batch_size and not self._hurry.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), min(remaining, 0.01)))
            except TimeoutError:
                continue
        return batch

    async def _consume(self) -> None:
        while True:
            batch = await self._next_batch()
            cases = [EvalCase.from_trace(trace) for trace in batch]
            for metric in self._scorer.metrics:
                try:
                    metric.prepare(cases)
                except Exception as exc:
                    logger.debug("agenteval: %s.prepare failed: %s", metric.name, exc)
            for case in cases:
                try:
                    await self._score(case)
                except Exception as exc:
                    self.stats.metric_errors += 1
                    logger.warning("agenteval could not score trace %s: %s", case.id, exc)
                finally:
                    self._done()

    async def _score(self, case: EvalCase) -> None:
        trace = case.trace
        assert trace is not None
        sampled = not self._judged or self._sampler.random() < self.judge_sample_rate
        if not sampled:
            self.stats.judge_not_sampled += 1
        scorer = self._scorer
        results = await scorer.score_case(case, skip=() if sampled else self._judged)
        self.monitor.forget(trace.id)
        self.stats.scored += 1
        self.stats.metric_errors += sum(1 for r in results if r.status == "error")
        session = scorer.session_results(trace.session_id) if trace.session_id else []
        outcome = TraceResults(
            trace_id=trace.id, session_id=trace.session_id, results=results, session_results=session
        )
        for result in results:
            if result.name == "loop_detection" and result.success is False:
                self._deliver_alert(
                    LoopAlert(
                        session_id=trace.session_id,
                        trace_id=trace.id,
                        pattern="loop_detection",
                        count=len(result.metadata.get("comparisons", [])),
                        message=f"output repeats earlier outputs of the session "
                        f"(loop_detection {result.score:.2f} < {result.threshold})",
                    )
                )
        if results_logger.isEnabledFor(logging.INFO):
            scores = ", ".join(f"{r.name}={r.score:.3f}" for r in results if r.score is not None)
            results_logger.info("trace %s (session %s): %s", trace.id, trace.session_id, scores)
        if self._results_file is not None:
            try:
                self._results_file.write(outcome.model_dump_json() + "\n")
                self._results_file.flush()
            except Exception as exc:
                self.stats.callback_errors += 1
                logger.warning("agenteval could not write results: %s", exc)
        self._call(self._result_callbacks, outcome)

    def _done(self) -> None:
        with self._idle:
            self._pending -= 1
            if self._pending <= 0:
                self._hurry.clear()
                self._idle.notify_all()

    # --- lifecycle ------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every trace handed over so far is captured and scored; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for pump in list(self._pumps):
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not pump.flush(remaining):
                return False
        with self._idle:
            if self._pending > 0:
                self._hurry.set()
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            return self._idle.wait_for(lambda: self._pending <= 0, remaining)

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout``), then stop the background loop and close the files.

        Safe to call twice. Traces submitted after close are still captured only if the
        capture is open, and are counted as unscored.
        """
        if self._closed:
            return
        self.flush(timeout)
        self._closed = True
        for pump in list(self._pumps):
            pump.close(timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        if self._capture is not None:
            self._capture.close()
        if self._results_file is not None:
            self._results_file.close()
        _live_evaluators.discard(self)

    def __enter__(self) -> OnlineEvaluator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_live_evaluators: weakref.WeakSet[OnlineEvaluator] = weakref.WeakSet()
_default: OnlineEvaluator | None = None
_default_lock = threading.Lock()


def default_evaluator() -> OnlineEvaluator:
    """The process-wide evaluator adapters use when none is given (capture in the cwd)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = OnlineEvaluator()
        return _default


@atexit.register
def _flush_at_exit() -> None:
    for evaluator in list(_live_evaluators):
        try:
            evaluator.close(evaluator.exit_timeout)
        except Exception as exc:
            logger.debug("agenteval exit flush failed: %s", exc)
