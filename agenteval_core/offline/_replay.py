"""Offline replay: stream a capture file through the same metrics the online evaluator runs."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from .._errors import CaptureFormatError, ResultsWriteError
from .._options import check_options
from .._text import first_words
from ..embedders._local import LocalEmbedder
from ..engine._engine import MAX_OPEN_SESSIONS, Engine
from ..engine._sinks import ResultsFileSink, Sink, is_results_directory, results_shards
from ..engine._summary import ResultSummary
from ..metrics._protocol import Metric, SessionMetric
from ..schema._capture import read_numbered
from ..schema._results import (
    LowestKept,
    MetricResult,
    TraceResults,
    flagged_traces,
    lowest_score,
)
from ..schema._trace import Trace, text_of
from ._line_index import OwnLines, read_own_lines

logger = logging.getLogger("agenteval")

__all__ = [
    "NumberedResultsFile",
    "ProcessTimes",
    "ReplayOptions",
    "ReplayReport",
    "areplay",
    "fewer_collections",
    "replay_lines",
    "unsendable",
    "warn_at_end",
]


class ReplayOptions(TypedDict, total=False):
    """What a replay scores with and where its results go: the keyword arguments that
    :func:`~agenteval_core.replay`, :func:`~agenteval_core.areplay` and every driver below
    them share, defined once (see :func:`~agenteval_core.replay` for each)."""

    judge: Any
    embedder: Any
    concurrency: int | None
    output: str | os.PathLike[str] | None
    sinks: Sequence[Sink]
    on_trace: Callable[[Trace, list[MetricResult]], None] | None
    on_bad_line: Callable[[CaptureFormatError], None] | None
    on_progress: Callable[[int], None] | None
    max_open_sessions: int


LOCAL_BATCH_SIZE = 64
"""Traces parsed and scored together when every embedder runs in this process. Each batch
costs a few hundred µs of its own (NumPy calls per metric, the embedder's per-call work),
which larger batches share: 48 to 96 traces measured alike, on traces of 3.6 kB and of
27 kB; 256 took twice as long to parse (the parsed traces no longer fit the CPU's cache)."""
REMOTE_BATCH_SIZE = 256
"""Traces scored together when a metric's embedder is remote: one request per batch."""
BATCH_BYTES = 16 << 20
"""A batch ends early once its lines reach this many bytes: a parsed trace takes about twice
its line's size, so traces of megabytes (large tool results) are scored a few at a time and
memory stays bounded by bytes, not by the number of traces."""


def _batch_size(engine: Engine) -> int:
    embedders = [getattr(metric, "embedder", None) for metric in engine.metrics]
    if all(e is None or isinstance(e, LocalEmbedder) for e in embedders):
        return LOCAL_BATCH_SIZE
    return REMOTE_BATCH_SIZE


@dataclass
class ProcessTimes:
    """How one process of a replay with workers spent it, in seconds from the replay's start
    (every process reads the machine's one monotonic clock). What it adds up to tells where
    a replay's time went: its start, its index, the wait for the others' (the join), the
    scoring, and the idle end while the last ones finish; a CPU time per trace that grows
    with the worker count says the cores slow each other down."""

    process: int
    """0 for the process that called replay, then the workers in the order they started."""
    started: float
    """When its code began to run."""
    indexed: float
    """When it had indexed its byte range of the capture file (of a capture directory,
    which needs no index: when it started)."""
    scoring: float
    """When it had the table of tasks (every process's index joined) and began to score."""
    finished: float
    """When its last task was done."""
    tasks: int
    """The tasks it took."""
    traces: int
    """The traces it scored."""
    cpu_seconds: float
    """The CPU time it used from its start to its end."""


@dataclass
class ReplayReport:
    """What a replay found: counts, per-metric summaries, session results and bad lines.

    ``session_results`` keeps the ``keep_sessions`` lowest-scoring sessions (by each
    session's lowest score; of equal ones, the first scored), all of them when there are no
    more: the sessions that need a look, with memory flat on huge captures. Every session
    goes to the output file and into ``session_summary``.
    """

    path: str
    keep_sessions: int = 1000
    traces: int = 0
    sessions: int = 0
    summary: ResultSummary = field(default_factory=ResultSummary)
    session_summary: ResultSummary = field(default_factory=ResultSummary)
    session_results: dict[str, list[MetricResult]] = field(default_factory=dict)
    flagged_inputs: dict[str, str] = field(default_factory=dict)
    """The first words of the input of each trace a kept session's metrics flagged, by
    trace id: what a reader recognises a flagged trace by."""
    _kept: LowestKept[str] = field(init=False, repr=False)
    """Which sessions ``session_results`` keeps."""
    bad_lines: list[CaptureFormatError] = field(default_factory=list)
    sessions_cut: int = 0
    """How many times a session was cut in two: closed to keep at most
    ``max_open_sessions`` open, then met by another of its traces. Each part is counted in
    ``sessions`` and has session metrics of its own, covering that part alone."""
    repeated_traces: int = 0
    """Traces read again in their session, or soon after with no session (the same run under
    the same id: a capture line written or shipped twice): each was scored once; a repeat's results are skipped results that say so, and
    it counts neither twice in its session nor as the agent repeating itself."""
    processes: list[ProcessTimes] = field(default_factory=list)
    """Of a replay with workers, how each process spent it, in process order (empty in one
    process, and on Ray)."""

    def __post_init__(self) -> None:
        self._kept = LowestKept(self.keep_sessions)

    def merge(self, other: ReplayReport) -> None:
        """Add the report of another part of the same replay (a worker's, a Ray task's):
        counts and summaries added, bad lines and processes appended, and its sessions kept
        as :meth:`keep` keeps them, each with its flagged traces' inputs."""
        self.traces += other.traces
        self.sessions += other.sessions
        self.summary.merge(other.summary)
        self.session_summary.merge(other.session_summary)
        for session_id, results in other.session_results.items():
            self.keep(session_id, results, other.flagged_inputs)
        self.bad_lines.extend(other.bad_lines)
        self.sessions_cut += other.sessions_cut
        self.repeated_traces += other.repeated_traces
        self.processes.extend(other.processes)

    def keep(self, session_id: str, results: list[MetricResult], inputs: dict[str, str]) -> None:
        """Keep a scored session among ``session_results`` if it is one of the
        ``keep_sessions`` lowest-scoring so far, with the inputs (``inputs``: first words
        by trace id) of the traces its metrics flagged; give up the highest-scoring kept
        one for it when they are full."""
        lowest = lowest_score(results)
        if session_id in self.session_results:  # the second part of a session cut in two
            if lowest >= lowest_score(self.session_results[session_id]):
                return
            self._give_up(session_id)
        kept, given_up = self._kept.offer(session_id, lowest)
        if given_up is not None:
            self._give_up(given_up)
        if not kept:
            return
        self.session_results[session_id] = results
        for trace_id in flagged_traces(results):
            if trace_id in inputs:
                self.flagged_inputs[trace_id] = inputs[trace_id]

    def _give_up(self, session_id: str) -> None:
        self._kept.discard(session_id)
        for trace_id in flagged_traces(self.session_results.pop(session_id)):
            self.flagged_inputs.pop(trace_id, None)

    def __repr__(self) -> str:
        # counts, not every session's results: asyncio formats the replay task (and so this
        # report) when it restores the Ctrl-C handler, and a REPL should print a short line
        return (
            f"ReplayReport(path={self.path!r}, traces={self.traces}, sessions={self.sessions}, "
            f"metrics={list(self.summary.metrics)}, bad_lines={len(self.bad_lines)})"
        )


class _ReportSink(Sink):
    """Fills a :class:`ReplayReport` and calls the user's ``on_trace``."""

    wants_session_snapshots = False  # the report keeps each session's final results only

    def __init__(
        self,
        report: ReplayReport,
        on_trace: Callable[[Trace, list[MetricResult]], None] | None,
    ) -> None:
        self.report = report
        self.on_trace = on_trace
        # each open kept session's inputs, until its session metrics say which were flagged
        self._inputs: dict[str, dict[str, str]] = {}

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        report = self.report
        if trace.session_id is not None and report.keep_sessions > 0:
            words = first_words(text_of(trace.input))
            self._inputs.setdefault(trace.session_id, {})[trace.id] = words
        report.traces += 1
        report.summary.add(results.results)
        if self.on_trace is not None:
            self.on_trace(trace, results.results)

    def session_scored(self, session_id: str, results: list[MetricResult]) -> None:
        report = self.report
        report.sessions += 1
        report.session_summary.add(results)
        report.keep(session_id, results, self._inputs.pop(session_id, {}))


RESULTS_BUFFER = 1 << 18
"""Bytes of results lines a replay writes at once (a few hundred lines): a write of its own
cost each line ~10 µs, about a sixth of what the results file added to a replay."""


class NumberedResultsFile(ResultsFileSink):
    """A worker's share of the results file: each line starts with its place in capture
    order, so the shares merge back into the file one process writes. A trace's line takes
    its capture line number; a session closed mid-replay follows the trace before it; once
    every trace of a task is scored (``all_scored``), the sessions closed then follow every
    trace, least recently active first, as one process closes them at its end.

    Each task's lines go to a part file of their own (``path``, then ``path.1``, ...), so
    that every part is in capture order and the parts merge in one pass."""

    AFTER_EVERY_TRACE = 1 << 62

    def __init__(self, path: str | os.PathLike[str], numbers: deque[int]) -> None:
        super().__init__(path, buffer_size=RESULTS_BUFFER)
        self.numbers = numbers
        self.position = 0
        self.all_scored = False
        self.first_part = self.path
        self.parts = 1
        self._part_ended = False
        self._last_trace: dict[str, int] = {}  # open sessions only

    def end_part(self) -> None:
        """The task's lines are all written: the next line starts the next part file."""
        self.all_scored = False
        self._part_ended = True

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        self.position = self.numbers.popleft()  # traces arrive in the order they were read
        if trace.session_id:
            self._last_trace[trace.session_id] = self.position
        super().trace_scored(trace, results)

    def session_scored(self, session_id: str, results: list[MetricResult]) -> None:
        last = self._last_trace.pop(session_id, self.position)
        if self.all_scored:
            self.position = self.AFTER_EVERY_TRACE + last
        super().session_scored(session_id, results)

    def _line(self, record: dict[str, Any]) -> bytes:
        return b"%d " % self.position + super()._line(record)

    def _write(self, record: dict[str, Any]) -> None:
        if not self._part_ended:
            super()._write(record)
            return
        self._part_ended = False
        try:  # the last part's pending lines; a failed write has counted those it lost
            self._next_part()
        finally:
            super()._write(record)

    def _next_part(self) -> None:
        with self._lock:
            if self._file is None:
                return
            try:
                self._write_pending()
            finally:
                self._file.close()
                self.path = self.first_part.with_name(f"{self.first_part.name}.{self.parts}")
                self.parts += 1
                self._file = self._open()
                self._end = -1


@contextmanager
def fewer_collections() -> Iterator[None]:
    """The cyclic garbage collector's thresholds for a replay, restored after.

    A replay keeps a batch of parsed traces alive, and each open session the traces loop
    detection reads; with the default thresholds the collector re-scans them every few
    hundred allocations (and the middle generation every tenth pass, ~40 ms each). Traces
    hold no cycles, so fewer passes cost nothing in memory and save time."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], 10_000), max(thresholds[1], 100), *thresholds[2:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


async def areplay(
    path: str | os.PathLike[str],
    metrics: Sequence[str | Metric | SessionMetric] | None = None,
    **options: Unpack[ReplayOptions],
) -> ReplayReport:
    """Score every trace of a capture file in this process; see :func:`replay` (the same
    ``options``)."""
    report = await replay_lines(path, metrics, **options)
    warn_at_end(report, options, elsewhere=True)
    return report


def unsendable(replay: str, exc: Exception, *, workers: str, imports: bool) -> ValueError:
    """The error of a replay whose metrics, embedder or judge cannot be pickled for its
    ``workers``: the cause, and what to do. ``imports``: the workers import each class by
    its module and name (processes), rather than receiving it whole (Ray)."""
    where = (
        "a worker imports each one's class by its module and name (define it at the top "
        "level of a module or of your script, not inside a function or a notebook) and "
        "receives its attributes pickled"
        if imports
        else "each is sent pickled with its attributes"
    )
    return ValueError(
        f"{replay}: the metrics, embedder or judge cannot be sent to {workers} "
        f"({type(exc).__name__}: {exc}); {where}, so none may hold a lock or an open client "
        "(a LangChain chat model holds its HTTP client: judge with OpenAIJudge(model, "
        "base_url=...) on its OpenAI-compatible API instead); or replay in one process"
    )


def warn_at_end(report: ReplayReport, options: ReplayOptions, *, elsewhere: bool) -> None:
    """Say once, at a replay's end, what no table shows: traces read twice in their session
    (scored once), and sessions cut in two (their session metrics given part by part).
    ``elsewhere``: workers and Ray, whose tasks each hold fewer sessions, are worth
    suggesting."""
    if report.repeated_traces:
        logger.warning(
            "agenteval: %d trace(s) were read again in their session (the same run under the same id: "
            "a capture line written or shipped twice); each was scored once, and its "
            "repeats are skipped results that say so",
            report.repeated_traces,
        )
    if not report.sessions_cut:
        return
    logger.warning(
        "agenteval: sessions were cut in two %d time(s): more than %d were open at once, so "
        "the least recently active closed, and each part's session metrics cover that part "
        "alone (the sessions counted are the parts); raise max_open_sessions "
        "(--max-open-sessions) above the sessions active at once in the capture%s",
        report.sessions_cut,
        options.get("max_open_sessions", MAX_OPEN_SESSIONS),
        ", or replay with workers or Ray, whose tasks each hold fewer sessions"
        if elsewhere
        else "",
    )


async def replay_lines(
    path: str | os.PathLike[str],
    metrics: Sequence[str | Metric | SessionMetric] | None = None,
    *,
    tasks: Iterable[tuple[int, int] | OwnLines] | None = None,
    numbered_output: str | os.PathLike[str] | None = None,
    between_batches: Callable[[], None] | None = None,
    **options: Unpack[ReplayOptions],
) -> ReplayReport:
    """:func:`areplay` over the lines of ``tasks``, one after another (every line when
    ``tasks`` is None): each an ``(index, count)`` shard of the capture, or a task's lines
    of a capture file, holding whole sessions, which are closed when it ends.
    ``numbered_output`` is a worker's share of the results file (see
    :class:`NumberedResultsFile`); ``between_batches`` is called after each batch and each
    task, and what it raises stops the replay."""
    check_options(options, ReplayOptions, "replay")
    judge, output = options.get("judge"), options.get("output")
    on_bad_line, on_progress = options.get("on_bad_line"), options.get("on_progress")
    preflight = getattr(judge, "preflight", None)
    if preflight is not None:  # a misconfigured judge fails now, not on every trace
        await preflight()
    for sink in options.get("sinks", ()):  # and an exporter that cannot deliver, too
        check = getattr(sink, "preflight", None)
        note = await asyncio.to_thread(check) if check is not None else None
        if note:
            logger.warning("agenteval: %s", note)
    report = ReplayReport(path=os.fspath(path))
    all_sinks: list[Sink] = [_ReportSink(report, options.get("on_trace"))]
    written: list[ResultsFileSink] = []  # the results file, or this worker's share of it
    if output is not None:
        if is_results_directory(output):  # one process: a directory of one shard
            (output,) = results_shards(output, 1)
        written.append(ResultsFileSink(output, buffer_size=RESULTS_BUFFER))
    numbers: deque[int] = deque()
    numbered = NumberedResultsFile(numbered_output, numbers) if numbered_output else None
    if numbered is not None:
        written.append(numbered)
    all_sinks += written
    all_sinks += options.get("sinks", ())
    engine = Engine(
        metrics,
        judge=judge,
        embedder=options.get("embedder"),
        sinks=all_sinks,
        concurrency=options.get("concurrency"),
        max_open_sessions=options.get("max_open_sessions", MAX_OPEN_SESSIONS),
    )

    def bad_line(error: CaptureFormatError) -> None:
        report.bad_lines.append(error)
        if on_bad_line is not None:
            on_bad_line(error)

    size = _batch_size(engine)
    read = 0  # bytes of the lines read since the last batch was handed on

    def progress(count: int) -> None:
        nonlocal read
        read += count
        if on_progress is not None:
            on_progress(count)

    def batches(task: tuple[int, int] | OwnLines | None) -> Iterator[list[Trace]]:
        nonlocal read
        batch: list[Trace] = []
        read = 0
        lines = (
            read_own_lines(path, task, on_error=bad_line, on_progress=progress)
            if isinstance(task, OwnLines)
            else read_numbered(path, on_error=bad_line, on_progress=progress, shard=task)
        )
        for number, trace in lines:
            if numbered is not None:
                numbers.append(number)
            batch.append(trace)
            if len(batch) == size or read >= BATCH_BYTES:
                yield batch
                batch = []
                read = 0
                if between_batches is not None:
                    between_batches()
        if batch:
            yield batch

    try:
        for task in [None] if tasks is None else tasks:
            await engine.stream(batches(task))
            if numbered is not None:
                numbered.all_scored = True
            engine.close_all()  # a task holds whole sessions: its sessions are all done
            if numbered is not None:
                numbered.end_part()
            if between_batches is not None:
                between_batches()
    finally:
        report.sessions_cut = engine.sessions_cut
        report.repeated_traces = engine.repeated_traces
        await engine.aclose()
        for sink in all_sinks:
            try:
                sink.close()
            except OSError:
                if sink not in written or sink.write_error is None:
                    raise  # otherwise counted by the sink and reported below
    for sink in written:
        if sink.lines_lost and sink.write_error is not None:  # never a file that looks whole
            raise ResultsWriteError(str(sink.path), sink.lines_lost, sink.write_error, report)
    return report
