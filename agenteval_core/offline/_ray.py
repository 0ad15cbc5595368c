"""Replay on Ray Data: captures larger than one machine can score in time.

The shape (see docs/replay-at-scale.md): a capture file on a file system (this machine's, or
one the nodes share) is indexed where it lies, by Ray tasks each taking a byte range (each
line's session from its first bytes, no full parse; the index worker processes use); the
lines of each partition of the sessions then make one task of a long-lived scorer (one per
worker: metrics, embedder and judge client built once), which reads them by their offsets,
parses them with agenteval's own tolerant reader, and scores them in capture order with the
same :class:`~agenteval_core.Engine` as one process, its sessions interleaved as they were
captured (a session whose lines lie in several files, one per process of a service, in the
order its runs started). No line crosses the cluster. Files in an object store are read by
tasks instead, and a groupby on a stable hash of the session brings each session's lines to
one partition.
The shards of a capture directory need neither: each is scored whole by one scorer task.
Judge requests from every worker go through one limiter per judge endpoint (a zero-CPU
actor), as do an HTTP embedder's, and a judge's spend is kept by one ledger. A scorer's
output is the data of its task, never a side effect, so a task that Ray retries after a
failure neither loses nor doubles a result. Each scorer task also returns its part of the
report (counts, summaries, sessions, bad lines); the driver writes the results lines as
they are and adds the parts up as they stream back, parsing no line, so that one driver
keeps up with a cluster.

Ray is imported only here, and only when a replay asks for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import glob
import io
import logging
import os
import pickle
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Unpack

import numpy as np

from .._errors import CaptureError, CaptureFormatError, ClusterUnreachableError, os_error_at
from .._sync import run_sync
from ..engine._engine import MAX_OPEN_SESSIONS, Engine, resolve_metrics
from ..engine._sinks import (
    Sink,
    encode_record,
    is_results_directory,
    results_shards,
    session_record,
    trace_record,
)
from ..judges._base import spends_against_budget
from ..metrics._protocol import Metric, MetricBase, SessionMetric
from ..metrics._registry import classes_of, register_metric
from ..schema._capture import (
    MAX_LINE_BYTES,
    is_capture_shard,
    line_session,
    parse_line,
    session_shard,
    split_lines,
)
from ..schema._results import MetricResult, TraceResults
from ..schema._trace import Trace
from ._line_index import (
    OwnLines,
    RangeIndex,
    byte_ranges,
    index_range,
    lines_by_shard,
    read_own_lines,
)
from ._replay import (
    ReplayOptions,
    ReplayReport,
    _batch_size,
    _ReportSink,
    fewer_collections,
    unsendable,
)

logger = logging.getLogger("agenteval")

__all__ = ["capture_files", "replay_on_ray", "reserve_slot"]

RAY_MISSING = (
    "replay with engine='ray' needs Ray Data, which is not installed: pip install 'agenteval[ray]'"
)
READ_ROWS = 4096
"""Lines a read task hands on at a time: a huge capture file streams through in blocks."""
READ_BYTES = 64 << 20
"""A block of lines ends early once its lines reach this many bytes: traces of megabytes
(large tool results) would otherwise make blocks of gigabytes, where Ray Data aims at
blocks of at most 128 MiB."""
RANGE_BYTES = 16 << 20
"""A capture file on a file system is indexed by up to one task a scorer at once, in byte
ranges of at least this many bytes: the index costs a few µs a line, and a 737 MB file read
by one task took 3.3 s of a 17 s replay on 16 CPUs."""
PARTITIONS_PER_SCORER = 4
"""Partitions of the sessions per scorer: enough for the scorers to share the work evenly,
few enough that each scorer call holds thousands of traces. One call per session cost more
than the scoring of a 10-trace session (0.24 of one process's rate on two CPUs, against
0.41 with 4 partitions a scorer)."""
PARTITION_BYTES = 128 << 20
"""More partitions are made when the captures would give each more than this many bytes of
lines: a scorer holds a partition's lines and their parsed traces at once."""
MIN_BLOCK_BYTES = 1 << 20
"""The smallest block the lines of a capture file are read into before the groupby's
shuffle (see :func:`replay_on_ray`): a small capture needs no more than one."""
SCORER_CPUS = 0.5
"""CPUs reserved per scorer: whole CPUs for every scorer would starve the read and shuffle
tasks (a replay on two cores then never finishes)."""


SCORER_BYTES = 16 << 20
"""Bytes of captures per scorer started by default, at least: a scorer's start (Ray's
worker process, agenteval's imports, the metrics and the embedder's model) costs about what
scoring this many bytes of traces takes. 200 traces on 2 CPUs took 1.25–1.38 s with one
scorer, 1.51–1.71 s with two (two runs of three pairs each)."""


CONNECT_TIMEOUT = 10.0
"""Seconds a replay waits for the named cluster's address to accept a connection before it
gives up with :class:`~agenteval_core.ClusterUnreachableError`. Ray itself, given an address
where nothing listens, tries again for a quarter of an hour (``host:port``) or half a minute
(``ray://``) without a word."""
RAY_CLIENT_PORT = 10001
"""The Ray Client server's port when a ``ray://`` address names none (Ray's default)."""


def check_reachable(address: str | None, timeout: float = CONNECT_TIMEOUT) -> None:
    """Raise :class:`~agenteval_core.ClusterUnreachableError` unless ``address``, when it
    names a host and port (``host:port``, a cluster's GCS; ``ray://host[:port]``, its Ray
    Client server), accepts a TCP connection within ``timeout`` seconds. Other addresses
    (``None``, ``auto``, ``local``, another scheme) are Ray's to resolve."""
    if not address:
        return
    scheme, _, location = address.rpartition("://")
    if scheme not in ("", "ray"):
        return
    host, colon, port = location.rpartition(":")
    if not colon or "]" in port:  # no port, or a bare IPv6 address: "[::1]"
        host, port = location, str(RAY_CLIENT_PORT) if scheme else ""
    if not port.isdigit():  # "auto", "local"
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        if isinstance(exc, TimeoutError):
            reason = f"no connection within {timeout:g} s"
        else:
            reason = exc.strerror or str(exc) or type(exc).__name__
        raise ClusterUnreachableError(
            f"cannot reach the Ray cluster at {address} ({reason[:1].lower()}{reason[1:]}): "
            "check that the cluster is up and that this is its head's address as seen from "
            "here, host:6379 (its GCS) or ray://host:10001 (Ray Client)"
        ) from exc


def scorer_count(node_cpus: Sequence[float], total_bytes: int) -> int:
    """How many scorers a replay of ``total_bytes`` of captures starts by default, on a
    cluster whose live nodes have ``node_cpus``: one per CPU, but no more than one per
    :data:`SCORER_BYTES` of captures, so that a small capture does not wait for a scorer
    per CPU to start; and at least one per node with a CPU, so that every node scores."""
    cpus = max(1, int(sum(node_cpus)))
    wanted = max(-(-total_bytes // SCORER_BYTES), sum(1 for node in node_cpus if node >= 1))
    return max(1, min(cpus, wanted))


def scorer_cpus(node_cpus: Sequence[float]) -> float:
    """The CPUs each scorer reserves when the groupby brings sessions to the scorers, on a
    cluster whose live nodes have ``node_cpus``: :data:`SCORER_CPUS`, or none where that
    would leave no node a whole CPU for the groupby's read and shuffle tasks (a single
    one-CPU node, where the replay would wait for ever). Reservations only schedule: a
    scorer that reserves none still works, sharing the CPU with the tasks it waits on."""
    whole = [cpus for cpus in node_cpus if cpus >= 1]
    room = len(whole) >= 2 or any(cpus >= 1 + SCORER_CPUS for cpus in whole)
    return SCORER_CPUS if room else 0.0


def scorers_at_start(
    node_cpus: Sequence[float], scorers: int, cpus_each: float, blocks: int
) -> int:
    """How many of ``scorers`` (each reserving ``cpus_each``) start with the replay when the
    groupby brings sessions to them, on a cluster whose live nodes have ``node_cpus``, for
    a shuffle that hands on at least ``blocks`` blocks: all of them (as many as there are
    blocks) when the CPUs they leave free add up to at least one a node (then, wherever Ray
    puts them, some node keeps a whole CPU for the read and shuffle tasks), else one, and
    the pool grows once the shuffle is done. Scorers that start with the replay build their
    metrics during the read and shuffle: started after it, 16 scorers on 16 CPUs were still
    starting 4 s into the scoring."""
    free = sum(node_cpus) - scorers * cpus_each
    return max(1, min(scorers, blocks)) if free >= len(node_cpus) else 1


def capture_files(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """The capture files that ``paths`` name, in order: files, globs and directories on this
    machine (every ``*.jsonl`` below a directory, sorted), and object-store URLs
    (``s3://``, ``gs://``, … through pyarrow's filesystems: a file, or every ``*.jsonl``
    below a prefix). Raises :class:`~agenteval_core.CaptureError` for a name that matches
    nothing."""
    found: list[str] = []
    for given in paths:
        name = os.fspath(given)
        if "://" in name and not name.startswith("file://"):
            found += _remote_files(name)
        elif glob.has_magic(name):
            matched = sorted(glob.glob(name, recursive=True))
            if not matched:
                raise CaptureError(f"{name}: no capture file matches this pattern")
            found += [str(Path(m).resolve()) for m in matched if os.path.isfile(m)]
        elif os.path.isdir(name):
            inside = sorted(str(p.resolve()) for p in Path(name).rglob("*.jsonl") if p.is_file())
            if not inside:
                raise CaptureError(f"{name}: a directory with no *.jsonl capture file in it")
            found += inside
        elif os.path.isfile(name.removeprefix("file://")):
            found.append(str(Path(name.removeprefix("file://")).resolve()))
        else:
            raise CaptureError(f"{name}: no such capture file")
    # a file named twice (a directory and a file in it, overlapping globs) is read once:
    # read twice, each of its traces would count twice and repeat itself in its session
    # (loop_detection's perfect match, a loop that never happened)
    once = list(dict.fromkeys(found))
    if len(once) < len(found):
        logger.warning(
            "agenteval: %d capture file(s) were named more than once; each is read once",
            len(found) - len(once),
        )
    return once


def _remote_files(url: str) -> list[str]:
    from pyarrow import fs

    filesystem, where = fs.FileSystem.from_uri(url)
    info = filesystem.get_file_info(where)
    scheme = url.split("://", 1)[0]
    # the URL's options (an S3-compatible store's endpoint_override, scheme, region) hold
    # for every file below it: each listed file keeps them
    options = url.partition("?")[2]
    suffix = f"?{options}" if options else ""
    if info.type == fs.FileType.File:
        return [url]
    if info.type != fs.FileType.Directory:
        raise CaptureError(f"{url}: no such capture file or prefix")
    inside = sorted(
        f"{scheme}://{entry.path}{suffix}"
        for entry in filesystem.get_file_info(fs.FileSelector(where, recursive=True))
        if entry.type == fs.FileType.File and entry.path.endswith(".jsonl")
    )
    if not inside:
        raise CaptureError(f"{url}: a prefix with no *.jsonl capture file below it")
    return inside


def _total_bytes(files: Sequence[str]) -> int:
    """How many bytes the capture files hold together (as :func:`capture_files` names them)."""
    total = 0
    for uri in files:
        if "://" not in uri:
            total += os.path.getsize(uri)
            continue
        from pyarrow import fs

        filesystem, where = fs.FileSystem.from_uri(uri)
        total += filesystem.get_file_info(where).size or 0
    return total


def _open(uri: str) -> io.BufferedReader:
    if "://" not in uri:
        return open(uri, "rb")  # closed by the caller
    from pyarrow import fs

    filesystem, where = fs.FileSystem.from_uri(uri)
    return io.BufferedReader(filesystem.open_input_stream(where), 1 << 20)


@contextlib.contextmanager
def _reading(uri: str) -> Iterator[None]:
    """A worker's failure to read capture ``uri`` as a :class:`CaptureError` that says which
    node could not and what to do; the driver raises it as it is, not in Ray's trace."""
    try:
        yield
    except OSError as exc:
        import ray

        fix = (
            "the workers need the store's credentials in their environment"
            if "://" in uri
            else "every node must see it at this path (a shared volume), or put the captures "
            "in an object store"
        )
        node = ray.util.get_node_ip_address()
        raise CaptureError(
            f"{uri}: a Ray worker on {node} cannot read it ({exc.strerror or exc}); {fix}"
        ) from None


def _index(uri: str, span: tuple[int, int | None], partitions: int) -> RangeIndex:
    """An index task: :func:`index_range` of one byte range of a capture file."""
    with _reading(uri):
        return index_range(uri, span, partitions)


def reads_in_place(files: Sequence[str]) -> bool:
    """Whether every capture file is on a file system (this machine's, or one the nodes
    share): each scorer then reads its own lines by their offsets, and no line goes through
    a shuffle. A file in an object store is read whole by one task, and its lines are
    brought to their sessions' partitions by a groupby."""
    return all("://" not in uri for uri in files)


def line_tasks(files: Sequence[str], partitions: int, readers: int) -> list[Any]:
    """The scorer tasks of capture files on a file system, one object of Ray's for each of
    ``partitions`` partitions of the sessions: where each of its lines lies in each file
    (a list of (file, :class:`OwnLines`): start, size and line number of each line), in
    capture order. Returned at once, while Ray works them out, so the scorers start (and
    build their metrics) meanwhile.

    Ray tasks index the files where they lie (a line's session, from its first bytes, picks
    its partition; a line without one goes by its number), each a byte range of at least
    :data:`RANGE_BYTES`, up to ``readers`` a file, all at once; one more joins them."""
    import ray

    # half a CPU each, as a scorer reserves: scorers that start first then never leave an
    # index task without a CPU (a one-CPU node holds one of each)
    index = ray.remote(num_cpus=SCORER_CPUS)(_index)
    found, ranges = [], []
    for file, uri in enumerate(files):
        count = max(1, min(readers, os.path.getsize(uri) // RANGE_BYTES))
        for span in byte_ranges(uri, count):
            found.append(file)
            ranges.append(index.remote(uri, span, partitions))
    join = ray.remote(num_cpus=0, num_returns=partitions)(_partitions_of)
    each: Any = join.remote(found, partitions, *ranges)  # a list, one for each return
    return list(each)


def _partitions_of(
    found: list[int], partitions: int, *ranges: RangeIndex
) -> list[list[tuple[int, OwnLines]]]:
    """Each partition's lines, file by file, from the indexes of the files' byte ranges
    (``found``: the file of each, the ranges of a file in order)."""
    by_file: dict[int, list[RangeIndex]] = {}
    for file, one in zip(found, ranges, strict=True):
        by_file.setdefault(file, []).append(one)
    tasks: list[list[tuple[int, OwnLines]]] = [[] for _ in range(partitions)]
    for file, indexes in by_file.items():  # in file order: a task's lines in capture order
        for task, lines in zip(tasks, lines_by_shard(indexes, partitions), strict=True):
            if len(lines):
                task.append((file, lines))
    return tasks


def _read_files(batch: dict[str, np.ndarray], partitions: int) -> Iterator[dict[str, list[Any]]]:
    """A read task of files in an object store: the lines of each of its files, each with
    the partition it is scored in (its session's, by a stable hash; a line without a session
    goes by its line number) and its place in capture order, in blocks of at most
    :data:`READ_ROWS` lines and about :data:`READ_BYTES` bytes. Blank lines are left out;
    an oversized line is passed on as its first bytes and its size."""
    for index, uri in zip(batch["file"], batch["uri"], strict=True):
        rows: dict[str, list[Any]] = {k: [] for k in ("group", "file", "number", "line", "size")}
        held = 0  # bytes of the lines in rows
        with _reading(str(uri)), _open(str(uri)) as handle:
            for number, line, oversize in split_lines(handle, MAX_LINE_BYTES):
                if not oversize and not line.strip():
                    continue
                session = None if oversize else line_session(line)
                kept = line[:1024] if oversize else line
                rows["group"].append(
                    session_shard(session, partitions) if session else number % partitions
                )
                rows["file"].append(int(index))
                rows["number"].append(number)
                rows["line"].append(kept)
                rows["size"].append(oversize)
                held += len(kept)
                if len(rows["number"]) == READ_ROWS or held >= READ_BYTES:
                    yield rows
                    rows, held = {k: [] for k in rows}, 0
        if rows["number"]:
            yield rows


class _SharedPace:
    """Waits for this request's turn at the limiter every worker shares."""

    def __init__(self, limiter: Any) -> None:
        self.limiter = limiter

    async def __call__(self) -> None:
        delay = await self.limiter.reserve.remote()
        if delay > 0:
            await asyncio.sleep(delay)


class _RateLimiter:
    """One endpoint's rate limit (a judge's, an HTTP embedder's) for the whole cluster: each
    request is given the next free slot, ``period / requests`` apart, and told how long to
    wait for it."""

    def __init__(self, requests: int, period: float) -> None:
        self.interval = period / requests
        self.next_free = 0.0

    def reserve(self) -> float:
        delay, self.next_free = reserve_slot(self.next_free, self.interval)
        return delay


def _limiter(client: Any) -> Any:
    """The cluster's one limiter of ``client``'s rate (an actor), or None for none or a
    client without one."""
    import ray

    traffic = getattr(client, "traffic", None)
    if traffic is None:
        return None
    limits = ray.remote(num_cpus=0)(_RateLimiter)
    return limits.remote(traffic.requests_per_period, traffic.period)


class _ClusterSpend:
    """A judge's spend kept by the ledger every worker shares: its ``budget_usd`` holds
    for the whole cluster (see :class:`~agenteval_core.judges.SharedSpend`)."""

    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger

    async def total(self) -> float:
        spent: float = await self.ledger.total.remote()
        return spent

    def add(self, usd: float) -> None:
        self.ledger.add.remote(usd)  # not waited for: the call goes on meanwhile


class _SpendLedger:
    """One judge's spend over the whole cluster, in US dollars."""

    def __init__(self) -> None:
        self.spent = 0.0

    def add(self, usd: float) -> None:
        self.spent += usd

    def total(self) -> float:
        return self.spent


def reserve_slot(next_free: float, interval: float) -> tuple[float, float]:
    """A request's turn under a rate limit kept as the next free slot: how long it waits
    (0 when the slot is free now) and the slot after it, ``interval`` later. Every limiter
    that several processes share (a Ray actor's, a replay's shared memory) takes turns here."""
    now = time.monotonic()
    slot = max(now, next_free)
    return slot - now, slot + interval


class _Collect(Sink):
    wants_session_snapshots = False  # the results file keeps each trace's session scores
    wants_session_scores = True

    def __init__(self) -> None:
        self.lines: list[tuple[str, bytes]] = []
        self.closed: list[str] = []
        """The sessions of the ``session`` lines, in order."""

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        self.lines.append(("trace", encode_record(trace_record(trace, results))))

    def session_scored(self, session_id: str, results: list[MetricResult]) -> None:
        self.lines.append(("session", encode_record(session_record(session_id, results))))
        self.closed.append(session_id)


class _SessionScorer:
    """A long-lived scorer on one worker: its metrics, embedder and judge client are built
    once; each call scores one partition of the sessions (every line of each) in capture
    order, as one process would score those lines.

    Each call also returns its part of the replay's report, filled as one process fills
    its own (counts, summaries, sessions, flagged inputs, bad lines): the driver adds the
    parts up and writes the results lines as they are, never parsing one, so it keeps up
    with a cluster."""

    def __init__(
        self,
        names: list[str],
        metrics: Sequence[str | Metric | SessionMetric] | None,
        registered: dict[str, type[MetricBase]],
        judge: Any,
        embedder: Any,
        concurrency: int | None,
        limiter: Any,
        embedder_limiter: Any,
        ledger: Any,
        results_lines: bool,
        max_open_sessions: int,
    ) -> None:
        if judge is not None and limiter is not None:
            judge.traffic.pace = _SharedPace(limiter)
        if embedder is not None and embedder_limiter is not None:
            embedder.traffic.pace = _SharedPace(embedder_limiter)
        if judge is not None and ledger is not None:
            judge.shared_spend = _ClusterSpend(ledger)
        for cls in registered.values():  # the classes the driver's names stand for
            register_metric(cls)
        self.names = names
        self.collect = _Collect()
        self.filling = _ReportSink(ReplayReport(path=""), on_trace=None)
        # with no results file to write, its lines are never made: making them is most of
        # what the file adds to a replay (a fifth), and every one would travel to the driver
        sinks = [self.collect, self.filling] if results_lines else [self.filling]
        self.engine = Engine(
            metrics,
            judge=judge,
            embedder=embedder,
            sinks=sinks,
            concurrency=concurrency,
            max_open_sessions=max_open_sessions,
        )
        self.batch = _batch_size(self.engine)
        self.loop = asyncio.new_event_loop()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        with fewer_collections():  # a call holds its traces at once, as one process's batch
            return self.score(self.parsed(batch))

    def parsed(self, group: dict[str, np.ndarray]) -> _Scored:
        """The lines of one partition of the sessions, parsed in capture order."""
        scored = _Scored()
        for row in np.lexsort((group["number"], group["file"])):
            scored.parse(
                self.names,
                int(group["file"][row]),
                int(group["number"][row]),
                bytes(group["line"][row]),
                int(group["size"][row]),
            )
        return scored

    def score(self, scored: _Scored) -> dict[str, list[Any]]:
        """Score the parsed traces in capture order, close their sessions, and return every
        line (each trace's results and each session's), then this part of the report."""
        scored.in_session_order()
        traces = scored.traces
        batches = [traces[i : i + self.batch] for i in range(0, len(traces), self.batch)]
        self.loop.run_until_complete(self.engine.stream(batches))
        self.engine.close_all()
        # a trace's line takes the trace's place in capture order, a session's the place of
        # its last trace: in a results directory, it goes to that trace's file's shard
        placed, closed = iter(scored.places), iter(self.collect.closed)
        ends = {t.session_id: place for t, place in zip(traces, scored.places, strict=True)}
        for kind, line in self.collect.lines:
            scored.emit(kind, *(next(placed) if kind == "trace" else ends[next(closed)]), line)
        self.collect.lines.clear()
        self.collect.closed.clear()
        last = scored.places[-1] if scored.places else (0, 0)
        part, self.filling.report = self.filling.report, ReplayReport(path="")
        part.bad_lines = scored.bad_lines
        part.sessions_cut, self.engine.sessions_cut = self.engine.sessions_cut, 0
        part.repeated_traces, self.engine.repeated_traces = self.engine.repeated_traces, 0
        scored.emit("report", *last, pickle.dumps(part))
        return scored.out


class _FileScorer(_SessionScorer):
    """A scorer of whole capture shards: every session of a shard lies in it (see
    ``CaptureWriter(shards=N)``), so a shard is read and scored by one task, in line order,
    with no shuffle. A shard's results are its task's one output, as a group's are."""

    def parsed(self, batch: dict[str, np.ndarray]) -> _Scored:
        """Every line of the task's capture shards, parsed in line order."""
        scored = _Scored()
        for index, uri in zip(batch["file"], batch["uri"], strict=True):
            with _reading(str(uri)), _open(str(uri)) as handle:
                for number, line, oversize in split_lines(handle, MAX_LINE_BYTES):
                    scored.parse(self.names, int(index), number, line, oversize)
        return scored


class _LineScorer(_SessionScorer):
    """A scorer of the lines of capture files on a file system: each task is one partition
    of the sessions, whose lines' places in each file are Ray's object ``tasks[partition]``
    (see :func:`line_tasks`); the scorer reads the lines there by their offsets, so no line
    crosses the cluster."""

    def __init__(self, *, tasks: list[Any], **scorer: Any) -> None:
        super().__init__(**scorer)
        self.tasks = tasks  # held in a list, so Ray hands them over unresolved

    def parsed(self, batch: dict[str, np.ndarray]) -> _Scored:
        """The task's lines, read and parsed file by file, each file's in line order."""
        import ray

        scored = _Scored()
        for partition in batch["partition"]:
            for file, lines in ray.get(self.tasks[int(partition)]):
                with _reading(self.names[file]):
                    for number, trace in read_own_lines(
                        self.names[file], lines, on_error=scored.bad_lines.append
                    ):
                        scored.add(file, number, trace)
        return scored


class _Scored:
    """What a scorer task returns, as it is built: the traces parsed (with their places in
    capture order), the lines that could not be, and the rows of output."""

    def __init__(self) -> None:
        self.traces: list[Trace] = []
        self.places: list[tuple[int, int]] = []
        self.bad_lines: list[CaptureFormatError] = []
        self.out: dict[str, list[Any]] = {"kind": [], "file": [], "number": [], "payload": []}

    def parse(self, names: list[str], file: int, number: int, line: bytes, size: int) -> None:
        problems, trace = parse_line(names[file], number, line, size)
        self.bad_lines += problems
        if trace is not None:
            self.add(file, number, trace)

    def add(self, file: int, number: int, trace: Trace) -> None:
        self.traces.append(trace)
        self.places.append((file, number))

    def in_session_order(self) -> None:
        """Put each session whose traces lie in more than one file (a service whose
        processes each write their own capture) in the order its runs started, ties in
        capture order. Its traces take the places its lines held in capture order, so the
        sessions stay interleaved as they were captured. A session in one file keeps its
        line order, as one process replays it; one with a trace of unknown start time
        keeps capture order."""
        files: dict[str, set[int]] = {}
        for trace, (file, _) in zip(self.traces, self.places, strict=True):
            if trace.session_id:
                files.setdefault(trace.session_id, set()).add(file)
        slots: dict[str, list[int]] = {}
        for index, trace in enumerate(self.traces):
            if trace.session_id and len(files[trace.session_id]) > 1:
                slots.setdefault(trace.session_id, []).append(index)
        traces, places = list(self.traces), list(self.places)
        for indices in slots.values():
            starts = [self.traces[index].start_time for index in indices]
            if None in starts:
                continue
            started = sorted(indices, key=lambda index: (self.traces[index].start_time, index))
            for slot, index in zip(indices, started, strict=True):
                traces[slot], places[slot] = self.traces[index], self.places[index]
        self.traces, self.places = traces, places

    def emit(self, kind: str, file: int, number: int, payload: bytes) -> None:
        for column, value in zip(self.out.values(), (kind, file, number, payload), strict=True):
            column.append(value)


def _listed(rows: list[dict[str, Any]]) -> Any:
    """A dataset of ``rows``, a block each (a task each), under this replay's settings."""
    import ray.data

    listed = ray.data.from_items(rows, override_num_blocks=len(rows))
    _replay_settings(listed.context)
    return listed


def _replay_settings(context: Any) -> None:
    """Ray Data's settings for this replay, on its dataset's own copy of the caller's
    ``DataContext`` (which stays as it was): no progress bars or start-up lines, a worker's
    errors as it raised them, and the sort-based shuffle for the groupby. The default hash
    shuffle starts an aggregator actor per CPU for every replay: 5 s of 7 for 10,000 traces
    on two CPUs, 19 s on 16, and slower on 16 CPUs than on 8."""
    from ray.data.context import ShuffleStrategy

    context.enable_progress_bars = False
    context.print_on_execution_start = False
    # a worker's error as it was raised (a capture it cannot read), not a UserCodeException
    # that keeps only its text
    context.raise_original_map_exception = True
    context.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED


def replay_on_ray(
    paths: Sequence[str | os.PathLike[str]],
    metrics: Sequence[str | Metric | SessionMetric] | None = None,
    *,
    address: str | None = None,
    scorers: int | None = None,
    **options: Unpack[ReplayOptions],
) -> ReplayReport:
    """Score captures on a Ray cluster (or Ray's local mode); see :func:`replay` (the same
    ``options``, less ``sinks`` and ``on_trace``, which would run in this process).

    ``paths`` are capture files, globs, directories or object-store URLs (see
    :func:`capture_files`). ``address`` is the cluster's (default: ``$RAY_ADDRESS``, or a
    local Ray started for this replay and stopped after it); a Ray already initialised in
    this process is used as it is. ``scorers`` long-lived scorers run at once (default: one
    per CPU of the cluster, fewer for a small capture, see :func:`scorer_count`; each
    reserving half a CPU, or none on a single one-CPU node, see :func:`scorer_cpus`).
    ``on_progress`` receives the number of traces scored so far as their results arrive.

    The results file (or, for an ``output`` directory, the results shard of each input
    file) holds the same lines as a one-process replay's, ordered partition by partition
    (of a capture directory, shard by shard): each partition's traces in capture order,
    then its sessions' lines. A session whose traces lie in several files (a service whose
    processes each write their own capture) is scored in the order its runs started, ties
    in capture order, each of its results in the place of one of its lines.
    """
    try:
        import ray
        import ray.data
        from ray.data import ActorPoolStrategy
    except ImportError:
        raise ImportError(RAY_MISSING) from None
    if options.get("sinks") or options.get("on_trace") is not None:
        raise ValueError(
            "replay on Ray takes no sinks or on_trace: Ray's workers score the traces on "
            "their machines; write the results file (output=...) and read it"
        )
    judge, embedder = options.get("judge"), options.get("embedder")
    concurrency, output = options.get("concurrency"), options.get("output")
    on_bad_line, on_progress = options.get("on_bad_line"), options.get("on_progress")
    files = capture_files(paths)
    # the names resolve here, before Ray starts: a misspelt one is said at once in one line,
    # and a metric the caller registered (its class in their script or notebook, which no
    # worker imports) travels to the workers with its name
    resolve_metrics(metrics, judge=judge, embedder=embedder)
    registered = classes_of(metrics)
    try:  # as Ray will send them, to every scorer: else Ray's words name none of them
        ray.cloudpickle.dumps((metrics, registered, judge, embedder))
    except Exception as exc:
        raise unsendable("replay on Ray", exc, workers="Ray's workers", imports=False) from exc
    preflight = getattr(judge, "preflight", None)
    if preflight is not None:  # a misconfigured judge fails now, not on every worker
        run_sync(preflight())
    started_here = not ray.is_initialized()
    if started_here:
        address = address or os.environ.get("RAY_ADDRESS")
        check_reachable(address)
        ray.init(
            address=address,
            include_dashboard=False,
            logging_level=logging.ERROR,
            configure_logging=False,
        )
    report = ReplayReport(path=", ".join(files))
    try:
        limiter, embedder_limiter = _limiter(judge), _limiter(embedder)
        ledger = (
            ray.remote(num_cpus=0)(_SpendLedger).remote() if spends_against_budget(judge) else None
        )
        nodes = [node["Resources"].get("CPU", 0.0) for node in ray.nodes() if node["Alive"]]
        total = _total_bytes(files)
        size = scorers or scorer_count(nodes, total)
        shards = all(is_capture_shard(uri) for uri in files)  # sessions never cross files
        scorer: dict[str, Any] = {
            "fn_constructor_kwargs": {
                "names": files,
                "metrics": metrics,
                "registered": registered,
                "judge": judge,
                "embedder": embedder,
                "concurrency": concurrency,
                "limiter": limiter,
                "embedder_limiter": embedder_limiter,
                "ledger": ledger,
                "results_lines": output is not None,
                "max_open_sessions": options.get("max_open_sessions", MAX_OPEN_SESSIONS),
            },
            "num_cpus": SCORER_CPUS,
            "batch_format": "numpy",
        }
        whole_files = [{"file": index, "uri": uri} for index, uri in enumerate(files)]
        partitions = max(PARTITIONS_PER_SCORER * size, -(-total // PARTITION_BYTES))
        if shards:
            listed = _listed(whole_files)
            pool = ActorPoolStrategy(size=size)
            scored = listed.map_batches(_FileScorer, batch_size=1, compute=pool, **scorer)
        elif reads_in_place(files):
            scorer["fn_constructor_kwargs"]["tasks"] = line_tasks(files, partitions, size)
            listed = _listed([{"partition": partition} for partition in range(partitions)])
            pool = ActorPoolStrategy(size=size)
            scored = listed.map_batches(_LineScorer, batch_size=1, compute=pool, **scorer)
        else:
            # the groupby's shuffle tasks each need a whole CPU on one node: scorers started
            # before it (half a CPU each, spread over the nodes) could leave no node with one,
            # and the replay would wait for ever (two one-CPU nodes did). Where they could,
            # one scorer waits for the shuffle; the pool grows once its groups arrive
            scorer["num_cpus"] = scorer_cpus(nodes)
            listed = _listed(whole_files)
            # Ray Data joins a read task's lines into blocks of up to 128 MiB, and its
            # sort-based shuffle hands on as many blocks as it is given: a capture file of
            # 74 MB went to one scorer call, whatever the CPUs. A block of a partition's
            # share of the bytes gives every scorer groups to score
            block = max(MIN_BLOCK_BYTES, -(-total // partitions))
            listed.context.target_max_block_size = block
            # blocks come out up to half again as large as the target: count them at double
            at_start = scorers_at_start(nodes, size, scorer["num_cpus"], total // (2 * block))
            pool = ActorPoolStrategy(min_size=at_start, max_size=size)
            scored = (
                listed.map_batches(
                    functools.partial(_read_files, partitions=partitions),
                    batch_size=1,
                    batch_format="numpy",
                )
                .groupby("group")
                .map_groups(_SessionScorer, compute=pool, **scorer)
            )
        try:
            _gather(scored, report, output, len(files), on_progress)
        except CaptureError as exc:  # a worker could not read a capture (see _reading)
            raise CaptureError(str(getattr(exc, "cause", None) or exc)) from None
    finally:
        if started_here:
            ray.shutdown()
    report.bad_lines.sort(key=lambda error: (files.index(error.path), error.line))
    if on_bad_line is not None:
        for error in report.bad_lines:
            on_bad_line(error)
    return report


class _ResultsOut:
    """Where the driver writes results lines: the results file, or in a results directory
    one shard per capture file (the results of the traces read from it, and of the
    sessions whose last trace it holds)."""

    def __init__(self, output: str | os.PathLike[str], files: int) -> None:
        self.shards = results_shards(output, files) if is_results_directory(output) else None
        self.opened: dict[int, IO[bytes]] = {}
        if self.shards is None:
            self.opened[0] = open(output, "wb")  # noqa: SIM115  (closed by __exit__)

    def write(self, file: int, line: bytes) -> None:
        if self.shards is None:
            file = 0
        elif file not in self.opened:
            self.opened[file] = open(self.shards[file], "wb")  # noqa: SIM115
        handle = self.opened[file]
        try:
            handle.write(line)
        except OSError as exc:  # a full disk: the error names the file
            raise os_error_at(exc, handle.name) from exc

    def __enter__(self) -> _ResultsOut:
        return self

    def __exit__(self, *exc_info: object) -> None:
        failed: OSError | None = None
        for handle in self.opened.values():  # each closed, each writing what it buffers
            try:
                handle.close()
            except OSError as exc:
                failed = failed or os_error_at(exc, handle.name)
        if failed is not None:
            raise failed


def _gather(
    scored: Any,
    report: ReplayReport,
    output: str | os.PathLike[str] | None,
    files: int,
    on_progress: Callable[[int], None] | None,
) -> None:
    """Write the results file and add up the scorers' parts of the report as their output
    streams back."""
    results = _ResultsOut(output, files) if output is not None else None
    with results or contextlib.nullcontext():
        for batch in scored.iter_batches(batch_format="numpy", batch_size=None):
            for kind, file, payload in zip(
                batch["kind"], batch["file"], batch["payload"], strict=True
            ):
                if kind == "report":
                    report.merge(pickle.loads(payload))
                elif results is not None:
                    results.write(int(file), bytes(payload))
            if on_progress is not None:
                on_progress(report.traces)
