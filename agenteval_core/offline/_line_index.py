"""A capture file split between replay workers without each reading all of it.

Every worker finds, for the lines of one byte range of the file, the shard of each (by the
line's session, from its first bytes); the ranges' findings are joined into each shard's
lines, which become the tasks the workers take one after another, largest first, reading
each task's lines by their offsets. Each line is thus passed over once in all, not once per
worker: a worker that read the whole file to find its own lines paid for every other
worker's lines too, which capped the workers at one process's reading rate.
"""

from __future__ import annotations

import mmap
import os
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO

import numpy as np

from .._errors import CaptureError, CaptureFormatError
from ..schema._capture import (
    MAX_LINE_BYTES,
    line_session,
    parse_lines,
    session_shard,
    split_lines,
)
from ..schema._trace import Trace

__all__ = [
    "OwnLines",
    "RangeIndex",
    "TaskTable",
    "byte_ranges",
    "index_range",
    "lines_by_shard",
    "read_own_lines",
]

_SEEK_CHUNK = 1 << 16


def byte_ranges(path: str | os.PathLike[str], count: int) -> list[tuple[int, int | None]]:
    """``count`` byte ranges of about equal size that together cover the capture file, each
    starting at the start of a line; the last one runs to the file's end, wherever that is
    by the time it is read (a capture still being written is read as one process reads it).

    Raises:
        CaptureError: no such file.
    """
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            starts = [0]
            for index in range(1, count):
                starts.append(max(starts[-1], _line_start_from(handle, index * size // count)))
    except FileNotFoundError:
        raise CaptureError(f"{os.fspath(path)}: no such capture file") from None
    ends: list[int | None] = [*starts[1:], None]
    return list(zip(starts, ends, strict=True))


def _line_start_from(handle: IO[bytes], position: int) -> int:
    """The first line start at or after ``position``: just past the first newline from the
    byte before it on (the file's end if there is none)."""
    if position == 0:
        return 0
    at = position - 1
    handle.seek(at)
    while chunk := handle.read(_SEEK_CHUNK):
        newline = chunk.find(b"\n")
        if newline >= 0:
            return at + newline + 1
        at += len(chunk)
    return at


@dataclass
class RangeIndex:
    """What one worker found in its byte range: for each of its lines, in order, where it
    starts, its size in bytes, and the shard its session falls in (-1 for a line without a
    session, which goes by its number in the file, known once every range is counted)."""

    starts: array[int] = field(default_factory=lambda: array("q"))
    sizes: array[int] = field(default_factory=lambda: array("q"))
    shards: array[int] = field(default_factory=lambda: array("i"))


def index_range(
    path: str | os.PathLike[str],
    span: tuple[int, int | None],
    count: int,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> RangeIndex:
    """Find which of ``count`` shards holds each line of the byte range ``span``.

    Each line goes where :func:`~agenteval_core.line_shard` puts it: a line's session picks
    its shard, from the line's first bytes, so each session is scored whole, by one worker,
    in order; a line without a session (or that is not a trace at all: the worker that
    reads it reports it) goes by its line number."""
    start, end = span
    found = RangeIndex()
    with open(path, "rb") as handle:
        handle.seek(start)
        position = start
        if end is None or position < end:
            for _, line, oversize in split_lines(handle, max_line_bytes):
                size = oversize or len(line)
                session = line_session(line)  # of an oversized line, its first bytes'
                found.starts.append(position)
                found.sizes.append(size)
                found.shards.append(session_shard(session, count) if session else -1)
                position += size
                if end is not None and position >= end:
                    break
    return found


@dataclass
class OwnLines:
    """The lines of a capture file one task reads: where each starts, its size and its
    line number in the file, in file order."""

    starts: np.ndarray
    sizes: np.ndarray
    numbers: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)


def lines_by_shard(ranges: Sequence[RangeIndex], count: int) -> list[OwnLines]:
    """Each of ``count`` shards' lines, from the ranges' indexes in file order: shard
    ``i``'s are those of :func:`~agenteval_core.read_capture`'s ``shard=(i, count)``."""
    starts, sizes, shards = (
        np.concatenate([np.frombuffer(getattr(found, column), dtype) for found in ranges])
        for column, dtype in (("starts", np.int64), ("sizes", np.int64), ("shards", np.intc))
    )
    numbers = np.arange(1, len(starts) + 1, dtype=np.int64)
    unsessioned = shards < 0
    shards[unsessioned] = numbers[unsessioned] % count
    order = np.argsort(shards, kind="stable")  # by shard, each shard's in file order
    bounds = np.searchsorted(shards[order], np.arange(count + 1))
    return [
        OwnLines(starts[mine], sizes[mine], numbers[mine])
        for mine in (order[bounds[i] : bounds[i + 1]] for i in range(count))
    ]


@dataclass
class TaskTable:
    """Every shard's lines of a capture file, the largest shard first: the tasks of a
    replay's workers, each taking the next task left when it finishes one. Taking tasks as
    they go, not a fixed share each, keeps every worker busy to the end, however the
    sessions' sizes or the cores' speeds differ. The lines are in a file every worker maps
    (24 bytes a line), not sent to each."""

    path: str
    """A ``.npy`` file of three rows: each line's start, size and line number, task after
    task."""
    bounds: list[int]
    """Task ``k``'s lines are the table's columns ``bounds[k]`` to ``bounds[k + 1]``."""

    @classmethod
    def write(cls, shards: Sequence[OwnLines], path: str) -> TaskTable:
        """The table of ``shards``' lines at ``path``; shards without lines are left out."""
        shards = sorted((s for s in shards if len(s)), key=lambda s: -int(s.sizes.sum()))
        columns = [np.stack([s.starts, s.sizes, s.numbers]) for s in shards]
        np.save(path, np.concatenate(columns, axis=1) if columns else np.zeros((3, 0), np.int64))
        bounds = np.cumsum([0, *(len(s) for s in shards)])
        return cls(path, bounds.tolist())

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def tasks(self, taken: Iterator[int]) -> Iterator[OwnLines]:
        """The lines of each task in ``taken``, read from the table's file."""
        rows = np.load(self.path, mmap_mode="r")
        for task in taken:
            start, end = self.bounds[task], self.bounds[task + 1]
            yield OwnLines(rows[0, start:end], rows[1, start:end], rows[2, start:end])


def read_own_lines(
    path: str | os.PathLike[str],
    lines: OwnLines,
    *,
    on_error: Callable[[CaptureFormatError], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[tuple[int, Trace]]:
    """The traces of one task's lines, each with its line number, read and reported as
    :func:`~agenteval_core.read_capture` reads and reports them (an oversized line is
    refused without being read)."""
    if not len(lines):  # nothing to read; and an empty file cannot be mapped
        return
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:

        def spans() -> Iterator[tuple[int, bytes, int]]:
            limit = max_line_bytes + 1  # what split_lines reads of a line
            for start, size, number in zip(
                lines.starts.tolist(), lines.sizes.tolist(), lines.numbers.tolist(), strict=True
            ):
                if on_progress is not None:
                    on_progress(size)
                line = view[start : start + min(size, limit)]
                oversize = size if len(line) > max_line_bytes and not line.endswith(b"\n") else 0
                yield number, line, oversize

        yield from parse_lines(os.fspath(path), spans(), on_error, max_line_bytes)
