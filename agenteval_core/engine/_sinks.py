"""Sinks: where scored traces, session results and loop alerts go.

The engine hands every scored trace to each sink (``trace_scored``) and every closed
session's results (``session_scored``); the online evaluator also hands them loop alerts.
A sink never stops scoring: an exception is logged and counted in ``errors``. The built-in
sinks are the results file (one format shared by online scoring and replay, read by the
report), logging, a console line per trace, and user callbacks.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pydantic_core

from .._fork import renew_after_fork
from ..schema._capture import append_line, appending, is_capture_shard
from ..schema._results import RESULTS_VERSION, MetricResult, ResultsLine, TraceResults
from ..schema._trace import LoopAlert, Trace

if TYPE_CHECKING:
    from .._redact import Redactor

__all__ = ["CallbackSink", "ConsoleSink", "LoggingSink", "ResultsFileSink", "Sink"]

logger = logging.getLogger("agenteval")


class Sink:
    """Receives results; override the methods you need (each default does nothing).

    Methods are called on the scoring loop's thread (alerts: on the recorder's thread) and
    should return quickly.
    """

    errors: int = 0
    """How many calls to this sink raised."""
    wants_session_snapshots: bool = True
    """Whether ``trace_scored`` reads ``results.session_results`` (the session's metrics
    after each trace). When no sink does, the engine does not compute them per trace; the
    final session results still arrive through ``session_scored``."""
    wants_session_scores: bool = False
    """Whether ``trace_scored`` reads ``results.session_scores`` only (the numbers, not the
    results): a sink that says so and not ``wants_session_snapshots`` gets the scores
    computed for less."""

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        """A trace was scored: ``results.results`` are its trace metrics,
        ``results.session_results`` its session's metrics as they stand after it."""

    def session_scored(self, session_id: str, results: list[MetricResult]) -> None:
        """A session was closed; these are its final session metrics."""

    def trace_unscored(self, trace_id: str, reason: str) -> None:
        """A captured trace will not be scored here (online only; called on the thread that
        found out): replaying the capture scores it."""

    def alert(self, alert: LoopAlert) -> None:
        """A loop alert was raised (online only)."""

    def attached(self, capture: Path | None, results: Path | None) -> None:
        """The sink was given to an online evaluator that captures to ``capture`` and writes
        results to ``results`` (either may be None)."""

    def redacted_by(self, redactor: Redactor | None) -> None:
        """The traces this sink will get went through ``redactor`` first (an online
        evaluator's; None: not redacted): a sink that redacts need not do it again."""

    def close(self) -> None:
        """Release what the sink holds (files); called once, when scoring ends. A sink that
        delivers over the network may take ``close(self, timeout=None)``: an online
        evaluator's ``close(timeout)`` then passes it the time left."""


class CallbackSink(Sink):
    """Calls ``on_trace(trace, results)`` for each scored trace, ``on_session(session_id,
    results)`` for each closed session and ``on_alert(alert)`` for each loop alert."""

    def __init__(
        self,
        on_trace: Callable[[Trace, TraceResults], Any] | None = None,
        *,
        on_session: Callable[[str, list[MetricResult]], Any] | None = None,
        on_alert: Callable[[LoopAlert], Any] | None = None,
    ) -> None:
        self.on_trace, self.on_session, self.on_alert = on_trace, on_session, on_alert
        self.wants_session_snapshots = on_trace is not None  # the user's code may read them

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        if self.on_trace is not None:
            self.on_trace(trace, results)

    def session_scored(self, session_id: str, results: list[MetricResult]) -> None:
        if self.on_session is not None:
            self.on_session(session_id, results)

    def alert(self, alert: LoopAlert) -> None:
        if self.on_alert is not None:
            self.on_alert(alert)

    def __repr__(self) -> str:
        return f"CallbackSink({self.on_trace or self.on_session or self.on_alert!r})"


def _record(**fields: Any) -> dict[str, Any]:
    """A results line's fields, as :class:`~agenteval_core.ResultsLine` reads them back
    (written as a dict: pydantic-core writes it, models inside, in one pass)."""
    unknown = fields.keys() - _LINE_FIELDS
    if unknown:
        raise TypeError(f"not fields of a results line: {sorted(unknown)}")
    return {"results_version": RESULTS_VERSION, **fields}


_LINE_FIELDS = frozenset(ResultsLine.model_fields)


def trace_record(trace: Trace, results: TraceResults) -> dict[str, Any]:
    """The results file's line for one scored trace (results stay models: they are
    serialised with the line)."""
    return _record(
        trace_id=trace.id,
        session_id=trace.session_id,
        status=trace.status,
        results=results.results,
        session_scores=results.session_scores,
    )


def session_record(session_id: str, results: list[MetricResult]) -> dict[str, Any]:
    """The results file's line for one closed session."""
    return _record(session_id=session_id, session_results=results)


def unscored_record(trace_id: str, reason: str) -> dict[str, Any]:
    """The results file's line for a captured trace that was not scored."""
    return _record(trace_id=trace_id, unscored=reason)


def encode_record(record: dict[str, Any]) -> bytes:
    """A results-file record as its line: pydantic-core writes the models straight to UTF-8
    JSON, ~10x faster than dumping them to dicts for json.dumps; a value JSON has no type for
    (a numpy number, a date, an object) is written as its str(), NaN as null."""
    return pydantic_core.to_json(record, serialize_unknown=True) + b"\n"


class ResultsFileSink(Sink):
    """The results file: JSON Lines, one line per scored trace (``trace_id``,
    ``session_id``, ``status``, ``results``, ``session_scores`` after it), one per closed session (``session_id``,
    ``session_results``) and, online, one per captured trace that was not scored
    (``trace_id``, ``unscored``: why). Each result is written once, so the file grows linearly; online
    scoring and replay write the same format, which ``agenteval report`` reads.

    By default each line is written as its trace is scored (online, the file is current).
    ``buffer_size`` bytes collects lines and writes them together, and the rest at
    :meth:`close`: a replay writes its file that way, one write per few hundred lines,
    since a replay that was killed is run again.
    """

    wants_session_snapshots = False  # a line keeps the session's scores, not its results
    wants_session_scores = True

    def __init__(
        self, path: str | os.PathLike[str], *, append: bool = False, buffer_size: int = 0
    ) -> None:
        self.path = Path(path)
        self.buffer_size = buffer_size
        self._pending = bytearray()
        self._file: IO[bytes] | None = self._open(append=append)
        self._lock = threading.Lock()
        self._end = -1  # where the last line ended
        self.lines_lost = 0
        """Lines whose write failed (a full disk): the file lacks them."""
        self.write_error: OSError | None = None
        """The first failed write's error."""
        renew_after_fork(self)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a parent thread may hold it at the fork

    def _open(self, *, append: bool = False) -> IO[bytes]:
        """The file at ``self.path``, unbuffered: one write per line (or buffer), so a
        write that fails (a full disk) loses those lines only, and the next line starts on
        a line of its own once space returns."""
        return open(self.path, "a+b" if append else "w+b", buffering=0)

    def _line(self, record: dict[str, Any]) -> bytes:
        return encode_record(record)

    def _write(self, record: dict[str, Any]) -> None:
        line = self._line(record)
        with self._lock:
            if self._file is None:
                return
            if not self.buffer_size:
                self._append(line)
                return
            self._pending += line
            if len(self._pending) >= self.buffer_size:
                self._write_pending()

    def _write_pending(self) -> None:
        pending, self._pending = self._pending, bytearray()
        if pending:  # a failed write loses these lines only
            self._append(pending)

    def _append(self, lines: bytes | bytearray) -> None:
        if self._file is None:
            return
        fd = self._file.fileno()
        start = self._end if self._end >= 0 else os.fstat(fd).st_size
        try:
            with appending(self._file):  # a reader of the live file waits for whole lines
                self._end = append_line(self._file, lines, self._end)
        except OSError as exc:  # counted here, raised for the caller to report as it does
            # the whole lines a full disk still took are in the file; the rest are lost
            stored = max(0, os.fstat(fd).st_size - start)
            self.lines_lost += lines.count(b"\n") - lines.count(b"\n", 0, stored)
            if self.write_error is None:
                self.write_error = exc
            raise

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        self._write(trace_record(trace, results))

    def session_scored(self, session_id: str, results: list[MetricResult]) -> None:
        self._write(session_record(session_id, results))

    def trace_unscored(self, trace_id: str, reason: str) -> None:
        self._write(unscored_record(trace_id, reason))

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    self._write_pending()
                finally:
                    self._file.close()
                    self._file = None

    def __repr__(self) -> str:
        return f"ResultsFileSink({str(self.path)!r})"


def is_results_directory(output: str | os.PathLike[str]) -> bool:
    """Whether ``output`` names a directory of results shards rather than a results file:
    an existing directory, or a path that ends with a separator."""
    name = os.fspath(output)
    return os.path.isdir(name) or name.endswith(("/", os.sep))


def results_shards(output: str | os.PathLike[str], count: int) -> list[Path]:
    """The ``count`` shard files of the results directory ``output``
    (``results-00000-of-0000N.jsonl`` and on), made ready to write: the directory is
    created, and results shards an earlier run left in it are removed (a report reads every
    ``*.jsonl`` there as one results file); nothing else in it is touched."""
    directory = Path(output)
    directory.mkdir(parents=True, exist_ok=True)
    if any(is_capture_shard(inside.name) for inside in directory.iterdir()):
        raise ValueError(
            f"{directory} holds a capture's shards; write the results to a directory of "
            "their own (a report reads every *.jsonl in it as results)"
        )
    for earlier in directory.iterdir():
        if _RESULTS_SHARD.fullmatch(earlier.name):
            earlier.unlink()
    return [directory / f"results-{index:05d}-of-{count:05d}.jsonl" for index in range(count)]


_RESULTS_SHARD = re.compile(r"results-\d{5,}-of-\d{5,}\.jsonl")


results_logger = logging.getLogger("agenteval.results")


class LoggingSink(Sink):
    """One INFO line per scored trace on the ``agenteval.results`` logger, one per closed
    session, and one WARNING line per loop alert on ``agenteval``."""

    wants_session_snapshots = False  # a trace's line holds its own scores

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        if results_logger.isEnabledFor(logging.INFO):
            scores = ", ".join(
                f"{r.name}={r.score:.3f}" for r in results.results if r.score is not None
            )
            results_logger.info("trace %s (session %s): %s", trace.id, trace.session_id, scores)

    def session_scored(self, session_id: str, results: list[MetricResult]) -> None:
        if results_logger.isEnabledFor(logging.INFO):
            scores = ", ".join(f"{r.name}={r.score:.3f}" for r in results if r.score is not None)
            results_logger.info("session %s closed: %s", session_id, scores)

    def alert(self, alert: LoopAlert) -> None:
        where = f"session {alert.session_id}, " if alert.session_id else ""
        action = "stopped the run" if alert.stopped else "the run goes on"
        logger.warning(
            "agenteval loop alert (%strace %s): %s; %s",
            where,
            alert.trace_id,
            alert.message,
            action,
        )


class ConsoleSink(Sink):
    """What a person at a terminal wants to see: one line per scored trace on stderr (its
    status, failing metrics first, then those that gave no score, with the reason the first
    time it is met), one per loop alert, and at close a summary: traces
    scored, failing and stopped, alerts, where the capture and results are, and the command
    that opens the report."""

    wants_session_snapshots = False  # a trace's line holds its own scores

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream
        self.traces = self.failing = self.unfinished = self.alerts = 0
        self._reasons_said: set[tuple[str, str]] = set()
        self.capture: Path | None = None
        self.results: Path | None = None

    def _print(self, line: str) -> None:
        print(line, file=self.stream or sys.stderr, flush=True)

    def attached(self, capture: Path | None, results: Path | None) -> None:
        self.capture, self.results = capture, results

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        failing = results.failing()
        passing = [r for r in results.results if r.score is not None and r not in failing]
        parts = [
            f"✗ {r.name} {'error' if r.score is None else f'{r.score:.2f}'}" for r in failing
        ] + [f"{r.name} {r.score:.2f}" for r in passing if r.score is not None]
        unscored = [r for r in results.results if r.status == "skipped"]
        if unscored:  # each reason said once: a long session would repeat it on every line
            parts.append(
                "not scored: "
                + ", ".join(r.name + ("" if self._said(r) else f" ({r.reason})") for r in unscored)
            )
        status = trace.status or "ok"
        self.traces += 1
        self.failing += bool(failing)
        self.unfinished += not trace.completed
        session = f" session {trace.session_id}" if trace.session_id else ""
        self._print(f"agenteval: trace {trace.id[:8]}{session} [{status}] " + ", ".join(parts))

    def _said(self, result: MetricResult) -> bool:
        """Whether this metric's reason was printed before (and from now on, it has been)."""
        said = (result.name, result.reason) in self._reasons_said
        self._reasons_said.add((result.name, result.reason))
        return said

    def alert(self, alert: LoopAlert) -> None:
        self.alerts += 1
        self._print(f"agenteval: loop alert: {alert.message}")

    def close(self) -> None:
        self._print(
            f"agenteval: {self.traces} trace(s) scored, {self.failing} with failing metrics, "
            f"{self.unfinished} that did not complete; {self.alerts} loop alert(s)"
        )
        if self.capture is not None:
            where = f"capture {self.capture}" + (
                f", results {self.results}" if self.results else ""
            )
            report = (
                f"agenteval report {self.results} --capture {self.capture}"
                if self.results
                else f"agenteval report {self.capture}"
            )
            self._print(f"agenteval: {where}; open the report with: {report}")


def close_sink(sink: Sink, timeout: float | None) -> None:
    """Close ``sink``, giving it the time left when its ``close`` takes a ``timeout``."""
    if timeout is not None and "timeout" in inspect.signature(sink.close).parameters:
        sink.close(timeout=timeout)  # type: ignore[call-arg]
    else:
        sink.close()
