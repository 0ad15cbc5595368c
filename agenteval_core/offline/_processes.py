"""replay(), the synchronous driver: in this process, or in several, each scoring the
sessions of one shard of the capture."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import multiprocessing
import os
import pickle
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Unpack

from .._errors import CaptureFormatError, ResultsWriteError, os_error_at
from .._options import check_options
from .._sync import run_sync
from ..engine._engine import MAX_OPEN_SESSIONS, checked_open_sessions_limit
from ..engine._sinks import Sink, is_results_directory, results_shards
from ..judges._base import spends_against_budget
from ..metrics._protocol import Metric, SessionMetric
from ..metrics._registry import classes_of, register_metric
from ..schema._capture import capture_parts
from ._line_index import (
    RangeIndex,
    TaskTable,
    byte_ranges,
    index_range,
    lines_by_shard,
)
from ._ray import replay_on_ray, reserve_slot
from ._replay import (
    ProcessTimes,
    ReplayOptions,
    ReplayReport,
    areplay,
    fewer_collections,
    replay_lines,
    unsendable,
    warn_at_end,
)

if TYPE_CHECKING:  # Windows has no fork server, nor its context class
    from multiprocessing.context import ForkServerContext, SpawnContext

__all__ = ["replay", "replay_in_workers"]

logger = logging.getLogger("agenteval")


def replay(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    metrics: Sequence[str | Metric | SessionMetric] | None = None,
    *,
    workers: int = 1,
    engine: Literal["local", "ray"] = "local",
    ray_address: str | None = None,
    **options: Unpack[ReplayOptions],
) -> ReplayReport:
    """Stream a capture file through metrics and return the report.

    ``options`` (a :class:`~agenteval_core.ReplayOptions`, shared with
    :func:`~agenteval_core.areplay`): ``judge``, ``embedder``, ``concurrency``, ``output``,
    ``sinks``, ``on_trace``, ``on_bad_line``, ``on_progress``, ``max_open_sessions``, as
    below.

    ``metrics`` are registry names or metric instances (default: the deterministic and embedding
    metrics that need no expectations, plus agent_reliability and agent_consistency, and the
    judge metrics when ``judge`` is given); ``judge`` and ``embedder`` go to the metrics that
    take them. Traces are scored by the same :class:`~agenteval_core.Engine` as online: up to
    ``concurrency`` at once (default: the judge's bound), a session's traces too, folded into
    the session in order. Bad lines go to ``on_bad_line`` and are skipped, so every good line is
    scored. With ``output``, the results file is written (see
    :class:`~agenteval_core.ResultsFileSink`), or, when ``output`` is a directory (an existing
    one, or a path ending in a separator), results shards in it
    (``results-00000-of-0000N.jsonl``: one per process, or per input file on Ray; earlier shards
    there are replaced), which ``agenteval report`` reads as one results file; ``sinks`` receive
    every result too. A results file that lacks lines once every trace is scored (a write failed
    on a full disk) raises :class:`~agenteval_core.ResultsWriteError`, which carries the report.
    A judge's preflight check runs first: a missing key, a bad URL, an unreachable server or a
    rejected key raises :class:`~agenteval_core.JudgeConfigError` before anything is scored.

    At most ``max_open_sessions`` sessions (default 1024) are open at once in a process;
    past that the least recently active close, so memory stays flat. A session closed so
    that meets another trace is cut in two: each part gets session metrics of its own, and
    :attr:`~agenteval_core.ReplayReport.sessions_cut` counts those times. Raise it above the
    number of sessions active at once in the capture (each open session holds its last few
    outputs and its session metrics' running state), or use workers or Ray, whose tasks
    each hold fewer sessions.

    ``workers`` processes (this one included) score at once. The capture is cut into tasks
    that each hold whole sessions (of a capture file, shards by session: each process first
    finds the shard of every line of one byte range of the file, from the line's first
    bytes; of a capture directory, its shard files), and each process takes the next task
    left, largest first, whenever it finishes one, reading only that task's lines. The
    report and the results file are those of one process, apart from timings. Metrics, the
    embedder and the judge are sent to them pickled (a judge as its settings: each worker
    keeps up to its concurrency in flight, and one rate limit in shared memory spaces the
    requests of all of them to its ``requests_per_period``); they import the calling script,
    so call this under ``if __name__ == "__main__":``. Workers take no ``sinks`` or
    ``on_trace`` (``ValueError``).

    ``engine="ray"`` scores on Ray Data (``pip install 'agenteval[ray]'``): on the cluster at
    ``ray_address`` (or ``$RAY_ADDRESS``), or in a local Ray started for the replay. ``path``
    may then be several files, globs, directories or object-store URLs (``s3://``, ``gs://``); a
    judge is sent to every worker, and one limiter keeps the whole cluster within its rate;
    ``on_progress`` then receives the number of traces scored so far. The results file holds the
    lines of a one-process replay, partition by partition (see
    :func:`~agenteval_core.offline.replay_on_ray`); ``sinks`` and ``on_trace`` run in this
    process and are refused, as with workers.
    """
    check_options(options, ReplayOptions, "replay")
    if "max_open_sessions" in options:  # before any process or Ray task starts
        checked_open_sessions_limit(options["max_open_sessions"])
    if engine not in ("local", "ray"):
        raise ValueError(f"engine must be 'local' or 'ray', got {engine!r}")
    sinks, on_trace = options.get("sinks", ()), options.get("on_trace")
    if engine == "ray":
        if workers != 1 or sinks or on_trace is not None:
            raise ValueError(
                "replay with engine='ray' takes no workers, sinks or on_trace: Ray's workers "
                "score the traces on their machines; write the results file (output=...) "
                "and read it"
            )
        report = replay_on_ray(
            [path] if isinstance(path, (str, os.PathLike)) else list(path),
            metrics,
            address=ray_address,
            **options,
        )
        warn_at_end(report, options, elsewhere=False)
        return report
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(
            "replay takes one capture file; several files, globs, directories and URLs are "
            "read with engine='ray'"
        )
    _check_workers(workers, sinks=sinks, on_trace=on_trace)
    if workers > 1:
        report = replay_in_workers(path, metrics, workers=workers, **options)
        warn_at_end(report, options, elsewhere=False)
        return report
    with fewer_collections():
        return run_sync(areplay(Path(path), metrics, **options))


def _check_workers(workers: int, *, sinks: Sequence[Sink], on_trace: Any) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a whole number >= 1, got {workers!r}")
    if workers == 1:
        return
    if sinks or on_trace is not None:
        raise ValueError(
            f"replay with workers={workers} cannot call sinks or on_trace: they run in this "
            "process and would need every result sent back to it; write the results file "
            "(output=...) and read it, or replay with workers=1"
        )


def replay_in_workers(
    path: str | os.PathLike[str],
    metrics: Sequence[str | Metric | SessionMetric] | None,
    *,
    workers: int,
    **options: Unpack[ReplayOptions],
) -> ReplayReport:
    """:func:`~agenteval_core.replay` with ``workers`` processes, this one included.

    Each process takes the next task left whenever it finishes one, the largest first;
    a task holds whole sessions, so each session is scored in order, as in one process. Of
    a file, the tasks are shards by session: each process first finds the shard of every
    line in one byte range of the file, and then reads only its tasks' lines (so no process
    reads the whole file); of a capture directory, they are its shard files. This process
    reports progress (every process's) and its bad lines as it goes; the others' bad lines
    arrive when they finish. The tasks' parts of the results file merge back into capture
    order; an ``output`` directory gets each process's as they are, one results shard per
    process."""
    embedder, concurrency = options.get("embedder"), options.get("concurrency")
    output, on_bad_line = options.get("output"), options.get("on_bad_line")
    on_progress, judge = options.get("on_progress"), options.get("judge")
    max_open_sessions = options.get("max_open_sessions", MAX_OPEN_SESSIONS)
    # before any process starts: a misspelt name, and what cannot be sent, are said here
    registered = classes_of(metrics)
    try:
        payload = pickle.dumps((metrics, registered, embedder, judge))
    except Exception as exc:
        replay = f"replay with workers={workers}"
        raise unsendable(replay, exc, workers="another process", imports=True) from exc
    numbered = output is not None and not is_results_directory(output)
    clock = _Clock(began=time.monotonic(), process=0)
    with contextlib.ExitStack() as cleanup:
        # the shares add up to the results file's size: they go where it goes, not to a /tmp
        # that may be small; a results directory takes each worker's share as it is
        shares = None
        parts: list[str | None] = [None] * workers
        if numbered and output is not None:
            shares = cleanup.enter_context(
                tempfile.TemporaryDirectory(prefix="agenteval-replay-", dir=Path(output).parent)
            )
            parts = [os.path.join(shares, f"{index}.jsonl") for index in range(workers)]
        elif output is not None:
            parts = [os.fspath(part) for part in results_shards(output, workers)]
        context = _start_method()
        limits = _SharedLimits.of(judge, embedder, context)
        progress = _SharedProgress(context.Value("q", 0)) if on_progress is not None else None
        taken = context.Value("i", 0)  # how many tasks the processes have taken
        # a capture file is cut by byte ranges, one per process, each indexed by its
        # process; a directory's tasks are its files
        files = ShardFiles.of(path) if Path(path).is_dir() else None
        if files is not None and len(files) < workers:
            logger.warning(
                "agenteval: %d workers for a capture directory of %d shard files: each file "
                "is scored whole by one process, so %d will have nothing to score: use at "
                "most %d workers, or write the capture in more shards (CaptureWriter(path, "
                "shards=N), agenteval shard)",
                workers,
                len(files),
                workers - len(files),
                len(files),
            )
        spans = byte_ranges(path, workers) if files is None else []
        shards = task_count(workers)
        others = _Workers()
        try:
            for index in range(1, workers):
                here, there = context.Pipe()
                process = context.Process(
                    target=_worker,
                    args=(there, os.fspath(path), payload, parts[index]),
                    kwargs={
                        "span": spans[index] if spans else None,
                        "shards": shards,
                        "files": files,
                        "taken": taken,
                        "concurrency": concurrency,
                        "max_open_sessions": max_open_sessions,
                        "limits": limits,
                        "progress": progress,
                        "numbered": numbered,
                        "environ": dict(os.environ),
                        "clock": _Clock(began=clock.began, process=index),
                    },
                    name=f"agenteval-replay-{index}",
                    daemon=True,
                )
                process.start()
                there.close()  # the worker holds the only other end: its death is seen
                others.started.append((process, here))
            tasks: TaskTable | ShardFiles
            if files is not None:
                tasks = files
            else:  # mapped by every process until the end (Windows cannot remove it before)
                table = cleanup.enter_context(
                    tempfile.TemporaryDirectory(
                        prefix="agenteval-tasks-", ignore_cleanup_errors=True
                    )
                )
                tasks = others.share_out(
                    path, spans[0], shards, os.path.join(table, "tasks.npy"), clock
                )

            def report_progress() -> None:
                if progress is not None and on_progress is not None:
                    progress.report(on_progress)

            def between_batches() -> None:
                others.check()  # a worker that failed stops this one too
                report_progress()

            with _shared_with_workers(judge, embedder, limits):
                try:
                    own = _run_tasks(
                        os.fspath(path),
                        metrics,
                        embedder,
                        judge,
                        tasks,
                        taken,
                        parts[0],
                        clock,
                        numbered=numbered,
                        concurrency=concurrency,
                        max_open_sessions=max_open_sessions,
                        on_bad_line=on_bad_line,
                        on_progress=on_progress,
                        between_batches=between_batches,
                    )
                except ResultsWriteError:  # every trace was scored: keep the others' lines too
                    others.wait(while_waiting=report_progress)
                    raise
            reports = others.wait(while_waiting=report_progress)
            report_progress()
        except ResultsWriteError as exc:
            if not numbered or output is None:  # a results directory: the error names its shard
                raise
            # a share of the results file failed: the results file is what lacks the lines
            raise ResultsWriteError(
                os.fspath(output), exc.lines_lost, exc.cause, at_least=True
            ) from exc
        finally:  # also when this process failed or was interrupted: no worker outlives it
            others.stop()
            if shares is not None and output is not None:  # kept, also when a worker failed
                _merge_shares(
                    sorted(os.path.join(shares, name) for name in os.listdir(shares)), Path(output)
                )
        report = _merged(own, reports)
        if on_bad_line is not None:
            for error in sorted((e for r in reports for e in r.bad_lines), key=_line_of):
                on_bad_line(error)
    return report


WORKER_MODULES = [
    "agenteval_core.offline._processes",
    "agenteval_core.metrics",
    "agenteval_core.embedders._preloaded",
]
"""What a worker imports before it scores: the fork server imports them once for all (the
last one loads the default embedder's model)."""


TASKS_PER_WORKER = 16
"""Tasks a capture file is cut into, per worker: the last task any process takes ends
within about a task's time of the others, a sixteenth of a worker's share."""
MOST_TASKS = 256
"""At most this many tasks (fewer per worker with more workers): merging the results file
opens every task's part of it at once."""


def task_count(workers: int) -> int:
    """How many tasks (shards by session) a capture file is cut into for ``workers``."""
    return workers * max(1, min(TASKS_PER_WORKER, MOST_TASKS // workers))


def _taken(taken: Any, count: int, mine: list[int]) -> Iterator[int]:
    """The tasks this process takes, one whenever it asks: the next of ``count`` that no
    process took yet (``taken``, shared by every process, counts those taken); each is
    also added to ``mine``."""
    while True:
        with taken.get_lock():
            task = taken.value
            taken.value = task + 1
        if task >= count:
            return
        mine.append(task)
        yield task


@dataclass
class ShardFiles:
    """The tasks of a capture directory: its shard files, the largest first."""

    order: list[int]
    """Each task's shard file, by its place among the directory's files."""

    @classmethod
    def of(cls, path: str | os.PathLike[str]) -> ShardFiles:
        sizes = [os.path.getsize(file) for file in capture_parts(path)]
        return cls(sorted(range(len(sizes)), key=lambda index: -sizes[index]))

    def __len__(self) -> int:
        return len(self.order)

    def tasks(self, taken: Iterator[int]) -> Iterator[tuple[int, int]]:
        """Each task in ``taken`` as the ``(index, count)`` shard that reads its file."""
        for task in taken:
            yield self.order[task], len(self.order)


def _start_method() -> SpawnContext | ForkServerContext:
    """How workers start: forked from a fork server where the platform has one (it imports
    agenteval once; a worker then forks in milliseconds, not the 0.4 s of CPU that a new
    Python importing it takes, paid again by every worker of every replay), else as new
    Python processes (Windows). Forking this process itself is unsafe once it has threads."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(WORKER_MODULES)  # takes effect when the server starts
    return context


class _Workers:
    """The worker processes of one replay, each with the pipe it talks on."""

    def __init__(self) -> None:
        self.started: list[tuple[Any, Connection]] = []
        self._reports: dict[int, ReplayReport] = {}

    def indexes(self) -> list[RangeIndex]:
        """Every worker's index of its byte range of the capture file, in worker order."""
        return [_received(process, connection, "index") for process, connection in self.started]

    def share_out(
        self,
        path: str | os.PathLike[str],
        span: tuple[int, int | None],
        shards: int,
        table: str,
        clock: _Clock,
    ) -> TaskTable:
        """Index this process's byte range of the capture file, join it with every worker's
        index into the table of tasks (one per shard of ``shards``) at ``table``, and send
        the table to each worker. The indexes (about 95 bytes a line of the file at their
        peak) are freed on return, before scoring."""
        own = index_range(path, span, shards)
        clock.indexed = time.monotonic()
        found = [own, *self.indexes()]
        tasks = TaskTable.write(lines_by_shard(found, shards), table)
        for process, connection in self.started:
            try:
                connection.send(tasks)
                continue
            except OSError:  # it stopped after sending its index
                pass
            # what it said, or its end, raised here and not in the handler: chained to the
            # failed send, the error kept that send's frames and the pickling buffer they
            # hold, which Python 3.12.1's garbage collector crashes on (CPython gh-111049)
            _received(process, connection, "error")
            raise RuntimeError(f"replay worker {process.name} stopped before it was sent its tasks")
        return tasks

    def check(self) -> None:
        """Take the report of each worker that has finished, without waiting; raise the
        error of one that failed (or died)."""
        for index, (process, connection) in enumerate(self.started):
            if index not in self._reports and connection.poll():
                self._reports[index] = _received(process, connection, "report")

    def wait(self, while_waiting: Callable[[], None]) -> list[ReplayReport]:
        """Every worker's report, in worker order, once each has sent it; ``while_waiting``
        is called every so often until then."""
        for index, (process, connection) in enumerate(self.started):
            if index not in self._reports:
                self._reports[index] = _received(process, connection, "report", while_waiting)
        return [self._reports[index] for index in range(len(self.started))]

    def stop(self) -> None:
        """End every worker still running and close the pipes."""
        for process, connection in self.started:
            if process.is_alive():
                process.terminate()
            process.join()
            connection.close()


def _worker(
    connection: Connection,
    path: str,
    payload: bytes,
    part: str | None,
    *,
    span: tuple[int, int | None] | None,
    shards: int,
    files: ShardFiles | None,
    taken: Any,
    concurrency: int | None,
    max_open_sessions: int,
    limits: _SharedLimits,
    progress: _SharedProgress | None,
    numbered: bool,
    environ: dict[str, str],
    clock: _Clock,
) -> None:
    """A worker process. Of a capture file, it first sends the index of its byte range
    ``span`` (in ``shards`` shards) and receives the table of tasks. Then it scores the
    tasks it takes (its metrics and judge arrive pickled; the judge waits on the rate limit
    every process shares) and sends back its report, or what went wrong."""
    # the environment as the replay started, as a new process would inherit it: the fork
    # server kept the one it started with
    os.environ.clear()
    os.environ.update(environ)
    clock.start()
    try:
        tasks: TaskTable | ShardFiles | None = files
        if span is not None:  # first: every process waits for every range's index
            own = index_range(path, span, shards)
            clock.indexed = time.monotonic()
            connection.send(("index", own))
            del own  # freed before scoring, as this process's own is
            tasks = connection.recv()  # before anything can fail: this process is sending
        assert tasks is not None
        metrics, registered, embedder, judge = pickle.loads(payload)
        for cls in registered.values():  # the classes the caller's names stand for
            register_metric(cls)
        with _shared_with_workers(judge, embedder, limits):
            report = _run_tasks(
                path,
                metrics,
                embedder,
                judge,
                tasks,
                taken,
                part,
                clock,
                numbered=numbered,
                concurrency=concurrency,
                max_open_sessions=max_open_sessions,
                on_progress=None if progress is None else progress.add,
                between_batches=None if progress is None else progress.flush,
            )
        if progress is not None:
            progress.flush()
        outcome: tuple[str, Any] = ("report", report)
    except BaseException as exc:  # sent back whole when it pickles, else as its text
        outcome = ("error", exc)
    try:
        connection.send(outcome)
    except Exception as exc:
        connection.send(
            ("error", RuntimeError(f"{type(outcome[1]).__name__}: {outcome[1]} ({exc})"))
        )
    connection.close()


WAITING_CALLS_EVERY = 0.25
"""Seconds between calls of what runs while this process waits for a worker (progress)."""


def _received(
    process: Any,
    connection: Connection,
    kind: str,
    while_waiting: Callable[[], None] | None = None,
) -> Any:
    """What a worker sends next (its ``kind``: its index, or its report); its error raised
    here; a worker that died says so."""
    timeout = None if while_waiting is None else WAITING_CALLS_EVERY
    while not wait([connection, process.sentinel], timeout):
        if while_waiting is not None:
            while_waiting()
    try:
        sent, value = connection.recv()
    except EOFError:  # it died without a word: its end of the pipe closed with it
        process.join()
        raise RuntimeError(
            f"replay worker {process.name} stopped with exit code {process.exitcode} before "
            "reporting. Workers start by importing the calling script: "
            'call replay(workers=...) from a file, under `if __name__ == "__main__":`'
        ) from None
    if sent == "error":
        raise value
    assert sent == kind, f"a worker sent its {sent} where its {kind} was due"
    return value


def _run_tasks(
    path: str,
    metrics: Sequence[str | Metric | SessionMetric] | None,
    embedder: Any,
    judge: Any,
    tasks: TaskTable | ShardFiles,
    taken: Any,
    part: str | None,
    clock: _Clock,
    *,
    numbered: bool,
    concurrency: int | None,
    max_open_sessions: int,
    on_bad_line: Callable[[CaptureFormatError], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    between_batches: Callable[[], None] | None = None,
) -> ReplayReport:
    """This process's share of the replay: the tasks it takes (``taken`` counts those every
    process took), one after another, until none is left. The report carries how this
    process spent its time (``clock`` has when it started and indexed)."""
    scoring = time.monotonic()
    mine: list[int] = []
    with fewer_collections():
        report = run_sync(
            replay_lines(
                path,
                metrics,
                embedder=embedder,
                judge=judge,
                concurrency=concurrency,
                max_open_sessions=max_open_sessions,
                on_bad_line=on_bad_line,
                on_progress=on_progress,
                tasks=tasks.tasks(_taken(taken, len(tasks), mine)),
                numbered_output=part if numbered else None,
                output=None if numbered else part,
                between_batches=between_batches,
            )
        )
    report.processes.append(clock.times(scoring, len(mine), report.traces))
    return report


@dataclass
class _Clock:
    """When one process of a replay started and indexed, for its :class:`ProcessTimes`.
    ``began`` (the replay's start) is on the machine's monotonic clock, which every
    process reads alike."""

    began: float
    process: int
    started: float = 0.0
    indexed: float | None = None
    cpu_started: float = 0.0

    def __post_init__(self) -> None:
        self.start()

    def start(self) -> None:
        """This process starts now (a worker calls it again once it runs)."""
        self.started, self.cpu_started = time.monotonic(), time.process_time()

    def times(self, scoring: float, tasks: int, traces: int) -> ProcessTimes:
        """This process's times, now that it has scored ``traces`` in ``tasks`` since
        ``scoring``."""
        finished, began = time.monotonic(), self.began
        return ProcessTimes(
            process=self.process,
            started=self.started - began,
            indexed=(self.started if self.indexed is None else self.indexed) - began,
            scoring=scoring - began,
            finished=finished - began,
            tasks=tasks,
            traces=traces,
            cpu_seconds=time.process_time() - self.cpu_started,
        )


class _ProcessPace:
    """One endpoint's rate limit (a judge's, an HTTP embedder's) for every process of a
    replay: the next free request slot, in shared memory. Each request takes the next slot,
    ``period / requests`` after the last one given out, and waits for it (on top of its own
    process's limits)."""

    def __init__(self, next_free: Any, interval: float) -> None:
        self.next_free = next_free  # a multiprocessing.Value("d"), inherited by the workers
        self.interval = interval

    @classmethod
    def of(cls, client: Any, context: Any) -> _ProcessPace | None:
        """The shared limit of ``client``'s rate, or None for none (or a client without)."""
        traffic = getattr(client, "traffic", None)
        if traffic is None:
            return None
        return cls(context.Value("d", 0.0), traffic.period / traffic.requests_per_period)

    async def __call__(self) -> None:
        with self.next_free.get_lock():  # time.monotonic is one clock for the whole machine
            delay, self.next_free.value = reserve_slot(self.next_free.value, self.interval)
        if delay > 0:
            await asyncio.sleep(delay)


class _ProcessSpend:
    """One judge's spend for every process of a replay, in shared memory: its
    ``budget_usd`` holds for all of them together (see :class:`~agenteval_core.judges.
    SharedSpend`)."""

    def __init__(self, spent: Any) -> None:
        self.spent = spent  # a multiprocessing.Value("d"), inherited by the workers

    @classmethod
    def of(cls, judge: Any, context: Any) -> _ProcessSpend | None:
        """The shared spend of ``judge``, or None for no judge (or one with no budget)."""
        if not spends_against_budget(judge):
            return None
        return cls(context.Value("d", 0.0))

    async def total(self) -> float:
        return float(self.spent.value)

    def add(self, usd: float) -> None:
        with self.spent.get_lock():
            self.spent.value += usd


class _SharedProgress:
    """The bytes of the capture file the workers have read, in shared memory, so that this
    process's ``on_progress`` tells of every process's: each worker adds its count after
    every batch; this process passes on what was added since it last looked."""

    def __init__(self, read: Any) -> None:
        self.read = read  # a multiprocessing.Value("q"), inherited by the workers
        self.unsent = 0  # in a worker: bytes read since it last added them
        self.reported = 0  # in this process: bytes passed on

    def add(self, size: int) -> None:
        self.unsent += size

    def flush(self) -> None:
        if self.unsent:
            with self.read.get_lock():
                self.read.value += self.unsent
            self.unsent = 0

    def report(self, on_progress: Callable[[int], None]) -> None:
        read = self.read.value
        if read > self.reported:
            on_progress(read - self.reported)
            self.reported = read


@dataclass(frozen=True)
class _SharedLimits:
    """What every process of a replay keeps together: the rate limit of the judge's
    endpoint and of the embedder's (an HTTP embedder), and the judge's spend."""

    judge_pace: _ProcessPace | None
    embedder_pace: _ProcessPace | None
    spend: _ProcessSpend | None

    @classmethod
    def of(cls, judge: Any, embedder: Any, context: Any) -> _SharedLimits:
        return cls(
            _ProcessPace.of(judge, context),
            _ProcessPace.of(embedder, context),
            _ProcessSpend.of(judge, context),
        )


@contextlib.contextmanager
def _shared_with_workers(judge: Any, embedder: Any, limits: _SharedLimits) -> Iterator[None]:
    """While this lasts, the judge and the embedder wait on the limits every process of
    the replay shares before each request, and the judge keeps its spend with theirs."""
    with contextlib.ExitStack() as stack:
        if limits.judge_pace is not None:
            stack.enter_context(_replaced(judge.traffic, "pace", limits.judge_pace))
        if limits.embedder_pace is not None:
            stack.enter_context(_replaced(embedder.traffic, "pace", limits.embedder_pace))
        if limits.spend is not None:
            stack.enter_context(_replaced(judge, "shared_spend", limits.spend))
        yield


@contextlib.contextmanager
def _replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name`` is ``value`` while this lasts, then what it was."""
    own = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, own)


def _line_of(error: CaptureFormatError) -> int:
    return error.line


def _merged(own: ReplayReport, others: Sequence[ReplayReport]) -> ReplayReport:
    """One report from the shards' reports, bad lines in line order (this process's
    sessions kept first)."""
    for other in others:
        own.merge(other)
    own.bad_lines.sort(key=_line_of)
    return own


def _merge_shares(parts: Sequence[str], output: Path) -> None:
    """Write the results file from the shards' numbered shares, in capture order (each share
    already is, so one merge pass does it); a session closed at the end follows every trace."""
    try:
        with output.open("wb") as merged:
            for _, line in heapq.merge(*(_numbered_lines(part) for part in parts), key=_position):
                merged.write(line)
    except OSError as exc:
        raise os_error_at(exc, output) from exc


def _numbered_lines(part: str) -> Iterator[tuple[int, bytes]]:
    if not os.path.exists(part):  # its worker failed before it wrote anything
        return
    with open(part, "rb") as share:
        for line in share:
            if line.endswith(b"\n"):  # a worker stopped mid-write leaves a torn last line
                number, _, record = line.partition(b" ")
                yield int(number), record


def _position(item: tuple[int, bytes]) -> int:
    return item[0]
