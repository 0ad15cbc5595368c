"""Append-only JSONL capture of traces: one trace per line, written whole and flushed."""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import math
import os
import re
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any, NamedTuple

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from .._errors import CaptureError, CaptureFormatError, SchemaVersionError
from .._fork import renew_after_fork
from .._sync import time_left
from ._trace import RESUMES_TRACE_ID, NewerVersionError, RecentRuns, Trace, read_again
from ._values import cut_text, plain

__all__ = [
    "MAX_LINE_BYTES",
    "CaptureWriter",
    "append_line",
    "appending",
    "line_session",
    "line_shard",
    "parse_line",
    "parse_lines",
    "read_capture",
    "read_in_run_order",
    "refuse_compressed",
    "rest_of_line_being_written",
    "runs_with_turns",
    "shard_capture",
    "skipping_bad_lines",
    "split_lines",
]

logger = logging.getLogger("agenteval")


class CaptureWriter:
    """Appends traces to a JSONL file, one line per trace.

    Each trace is written with a single unbuffered ``write`` in append mode (continued if the
    system takes only part of a large line), so a crash loses at most the line being
    written. Several writers, threads or processes, can share one file: on POSIX each line is
    appended under an exclusive ``flock`` of the file, so lines of different processes never
    interleave even when the system splits a large write. Before each line the writer checks
    that the file ends with a newline: a fragment left by a writer that was killed mid-line
    (or by a write that failed, e.g. on a full disk) is closed off on a line of its own, so
    the file is valid JSON Lines again from the next line on and any JSON Lines reader can
    read it (agenteval's reader reports the fragment as truncated).

    The file is reopened when its path no longer leads to it (deleted, or renamed by a log
    rotation without ``copytruncate``), so later traces go to a new file at ``path``; this is
    logged once per reopening. After ``fork()`` the child reopens the file and renews its
    lock, so a lock held by a parent thread at the fork never blocks the child. Thread-safe.

    The writer knows which lines of the file are its own (:meth:`read_written`): where
    other writers share the file, its runs are told apart from theirs.

    ``shards=N`` makes ``path`` a capture directory of ``N`` files,
    ``part-00000-of-0000N.jsonl`` and on, each trace in the file its session picks (a stable
    hash of the session id; the trace id for a trace without one), so every session lies in
    one file, in order: workers then each read whole files of their own, and
    :func:`read_capture` reads the directory as one capture.
    """

    def __new__(
        cls, path: str | os.PathLike[str], *, fsync: bool = False, shards: int | None = None
    ) -> CaptureWriter:
        if shards is not None and cls is CaptureWriter:
            return super().__new__(_ShardedCaptureWriter)
        return super().__new__(cls)

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = False, shards: int | None = None
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.written = 0
        self._reopened = 0
        self._lock = threading.Lock()
        self._file = self._open()
        self._path_checked = time.monotonic()
        self._end = -1  # where this writer's last line ended
        # the byte ranges [start, end) of the open file that this writer's lines fill, one
        # range while nobody else appends between them: a writer alone holds one range
        # however many lines it writes
        self._ranges: list[list[int]] = []
        renew_after_fork(self)

    def _open(self) -> IO[bytes]:
        return open(self.path, "a+b", buffering=0)  # readable: see append_line

    def write(self, trace: Trace) -> None:
        """Append one trace as a line and flush it to the operating system."""
        line = memoryview(encode_trace(trace) + b"\n")
        with self._lock:
            self._follow_path()
            with appending(self._file):
                self._end = append_line(self._file, line, self._end)
            start = self._end - len(line)
            if self._ranges and start < self._ranges[-1][1]:
                self._ranges = []  # truncated in place (copytruncate): those lines are gone
            if self._ranges and self._ranges[-1][1] == start:
                self._ranges[-1][1] = self._end
            else:
                self._ranges.append([start, self._end])
            if self.fsync:
                os.fsync(self._file.fileno())
            self.written += 1

    def _follow_path(self) -> None:
        """Reopen the file when ``path`` no longer names the open file (deleted or renamed).
        Looked at most every ``PATH_CHECK_INTERVAL`` seconds: under load each system call
        lets the agent's threads take the interpreter for a while."""
        now = time.monotonic()
        if now - self._path_checked < PATH_CHECK_INTERVAL:
            return
        self._path_checked = now
        try:
            opened = os.fstat(self._file.fileno())
            current = os.stat(self.path)
            same = (current.st_dev, current.st_ino) == (opened.st_dev, opened.st_ino)
        except FileNotFoundError:
            same = False
        if same:
            return
        self._file.close()
        self._file = self._open()
        self._end = -1
        self._ranges = []  # a new file: the lines written so far are in the one moved away
        self._reopened += 1
        logger.warning(
            "agenteval: the capture file %s was deleted or renamed; reopened it at that path "
            "(later traces go to the new file)",
            self.path,
        )

    @property
    def reopened(self) -> int:
        """How many times the file was reopened because its path had moved on."""
        return self._reopened

    def read_written(
        self, *, on_error: Callable[[CaptureFormatError], None] | None = None
    ) -> Iterator[Trace]:
        """The traces this writer wrote, read back from the file at ``path`` in the order
        they were written (a capture directory's shard by shard); the lines other writers
        appended to the same file (another evaluator or process sharing it, the runs of
        earlier ones) are left out. After the file was moved away or truncated (see above),
        those written since. A bad line is raised as :class:`CaptureFormatError`, or passed
        to ``on_error``."""
        with self._lock:
            ranges = [(start, end) for start, end in reversed(self._ranges)]
        if not ranges:
            return

        def own(lines: Iterable[tuple[int, bytes, int]]) -> Iterator[tuple[int, bytes, int]]:
            position = 0
            for number, line, oversize in lines:
                start, position = position, position + (oversize or len(line))
                while ranges[-1][1] <= start:  # ranges ascend from the end of the list
                    ranges.pop()
                    if not ranges:
                        return
                if ranges[-1][0] <= start:
                    yield number, line, oversize

        with open(self.path, "rb") as handle:
            for _, trace in parse_lines(os.fspath(self.path), own(split_lines(handle)), on_error):
                yield trace

    def close(self, timeout: float = 5.0) -> None:
        """Close the file; later writes raise ``ValueError``. Waits at most ``timeout``
        seconds for a write in progress."""
        acquired = self._lock.acquire(timeout=timeout)
        try:
            self._file.close()
        finally:
            if acquired:
                self._lock.release()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        if not self._file.closed:
            # the child's own open file: a flock is held per open file, and the parent's
            # may be held at the fork
            self._file = self._open()
            self._end = -1

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


PATH_CHECK_INTERVAL = 0.5
"""Seconds between checks that the capture's path still leads to the open file."""


class _ShardedCaptureWriter(CaptureWriter):
    """``CaptureWriter(directory, shards=N)``: one single-file writer per shard."""

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = False, shards: int | None = None
    ) -> None:
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise ValueError(f"shards must be a whole number >= 1, got {shards!r}")
        self.path = Path(path)
        self.fsync = fsync
        self.written = 0
        if self.path.exists() and not self.path.is_dir():
            raise CaptureError(
                f"{self.path}: a file; CaptureWriter(path, shards=N) writes a capture "
                "directory: pass a directory path, or no shards for one file"
            )
        existing = _shard_counts(self.path) if self.path.is_dir() else set()
        if existing - {shards}:
            first = min(existing)
            raise CaptureError(
                f"{self.path} holds a capture in {first} shards; writing {shards} would split "
                f"its sessions between files: pass shards={first}, or another directory"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        self.parts = [
            CaptureWriter(self.path / shard_name(index, shards), fsync=fsync)
            for index in range(shards)
        ]

    def write(self, trace: Trace) -> None:
        key = trace.session_id if trace.session_id is not None else trace.id
        shard = session_shard(key.encode("utf-8", "surrogatepass"), len(self.parts))
        self.parts[shard].write(trace)
        self.written += 1

    @property
    def reopened(self) -> int:
        """How many times a shard's file was reopened because its path had moved on."""
        return sum(part.reopened for part in self.parts)

    def read_written(
        self, *, on_error: Callable[[CaptureFormatError], None] | None = None
    ) -> Iterator[Trace]:
        for part in self.parts:  # shard by shard, as read_capture reads the directory
            yield from part.read_written(on_error=on_error)

    def close(self, timeout: float = 5.0) -> None:
        remaining = time_left(timeout)
        for part in self.parts:
            part.close(remaining())

    @property
    def closed(self) -> bool:
        return all(part.closed for part in self.parts)


def shard_name(index: int, count: int) -> str:
    """The file name of shard ``index`` of a capture directory of ``count`` shards."""
    return f"part-{index:05d}-of-{count:05d}.jsonl"


_SHARD_NAME = re.compile(r"part-(\d{5,})-of-(\d{5,})\.jsonl")


def is_capture_shard(name: str) -> bool:
    """Whether a file (a path, or a URL with or without options) is named as a shard of a
    capture directory."""
    if "://" in name:
        name = name.partition("?")[0]
    return _SHARD_NAME.fullmatch(name.replace(os.sep, "/").rsplit("/", 1)[-1]) is not None


def _shard_counts(directory: Path) -> set[int]:
    return {
        int(match.group(2))
        for child in directory.iterdir()
        if (match := _SHARD_NAME.fullmatch(child.name))
    }


_COMPRESSED = (
    (b"\x1f\x8b", "gzip", "gunzip -k"),
    (b"\x28\xb5\x2f\xfd", "zstd", "zstd -d"),
    (b"\xfd7zXZ\x00", "xz", "unxz -k"),
    (b"BZh", "bzip2", "bunzip2 -k"),
)
"""The first bytes of compressed files (a JSON line starts with ``{``), with the command that
decompresses one."""


def refuse_compressed(path: Path) -> None:
    """Refuse a compressed file in one line that says how to read it: each of its lines
    would otherwise be reported as not UTF-8. Captures, results and span files are read as
    the plain JSON they are written as (captures by byte ranges when replayed in parallel,
    which a compressed stream cannot give).

    Raises:
        CaptureError: the file starts as a gzip, zstd, xz or bzip2 file does.
    """
    try:
        with open(path, "rb") as handle:
            start = handle.read(6)
    except OSError:
        return  # the reader says what is wrong with it
    for magic, kind, command in _COMPRESSED:
        if start.startswith(magic):
            raise CaptureError(
                f"{path}: a {kind}-compressed file; decompress it first ({command} {path}): "
                "agenteval reads JSON Lines as they are written"
            )


def capture_parts(path: str | os.PathLike[str]) -> list[Path]:
    """The files of a capture, in capture order: ``[path]`` for a file; a capture
    directory's shards (see ``CaptureWriter(shards=N)``) in shard order.

    Raises:
        CaptureError: no such file; a directory that holds no capture shards, or shards of
            two different counts.
    """
    path = Path(path)
    if not path.is_dir():
        if not path.exists():
            raise CaptureError(f"{path}: no such capture file")
        refuse_compressed(path)
        return [path]
    counts = _shard_counts(path)
    if not counts:
        raise CaptureError(
            f"{path}: a directory with no capture shards (part-NNNNN-of-NNNNN.jsonl, as "
            "CaptureWriter(path, shards=N) or agenteval shard writes); pass a capture file, "
            "or replay on Ray (--engine ray, engine='ray'), which reads every *.jsonl below "
            "a directory"
        )
    if len(counts) > 1:
        raise CaptureError(
            f"{path}: shards of {len(counts)} different counts ({sorted(counts)}); a capture "
            "directory holds the shards of one writer"
        )
    (count,) = counts
    return [path / shard_name(index, count) for index in range(count)]


def shard_capture(
    source: str | os.PathLike[str], directory: str | os.PathLike[str], shards: int
) -> list[int]:
    """Split the capture file ``source`` into the capture directory ``directory`` of
    ``shards`` files, each session in one (the shard ``CaptureWriter(directory,
    shards=N)`` would give it), so workers and Ray read it in parallel. Lines are copied as
    they are, in order, without being parsed (a line's session is read from its first
    bytes); a line with no session goes by its line number, a bad one too, for the reader
    to report as it would have. Returns how many lines each shard got.

    Raises:
        CaptureError: ``source`` is missing, or ``directory`` already holds shards.
        ValueError: ``shards`` is not a whole number >= 1.
    """
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"shards must be a whole number >= 1, got {shards!r}")
    target = Path(directory)
    if target.is_dir() and _shard_counts(target):
        raise CaptureError(f"{target} already holds a capture's shards; shard into a new directory")
    try:
        reader = open(source, "rb")  # noqa: SIM115  (closed below)
    except FileNotFoundError:
        raise CaptureError(f"{os.fspath(source)}: no such capture file") from None
    target.mkdir(parents=True, exist_ok=True)
    counts = [0] * shards
    with reader, contextlib.ExitStack() as stack:
        files = [
            stack.enter_context(open(target / shard_name(index, shards), "xb"))
            for index in range(shards)
        ]
        for number, line in enumerate(reader, start=1):  # a huge line is copied whole
            session = line_session(line)
            index = session_shard(session, shards) if session else number % shards
            files[index].write(line if line.endswith(b"\n") else line + b"\n")
            counts[index] += 1
    return counts


def session_shard(key: bytes, count: int) -> int:
    """Which of ``count`` shards a session (its id's UTF-8) falls in: the same in every
    process and every run."""
    return zlib.crc32(key) % count


def append_line(file: IO[bytes], line: bytes | bytearray | memoryview, known_end: int = -1) -> int:
    """Write one whole line (ending in a newline) to an unbuffered file opened for reading
    too, on a line of its own: a torn last line (a killed writer's, or a write that failed
    on a full disk) is first ended with a newline, so the file stays valid JSON Lines from
    the next line on. ``known_end`` is where the caller's own last line ended (the file then
    needs no look at its last byte); returns where this line ends."""
    fd = file.fileno()
    size = os.fstat(fd).st_size
    if 0 < size != known_end and _last_byte(file, fd, size) != b"\n":
        size += file.write(b"\n") or 0
    line = memoryview(line)
    while line:  # an unbuffered write may take part of a large line: write the rest
        written = file.write(line) or 0
        size += written
        line = line[written:]
    return size


@contextlib.contextmanager
def appending(file: IO[bytes]) -> Iterator[None]:
    """Hold ``file``'s exclusive lock while lines are appended to it: writers of other
    processes wait, and so does a reader that met a last line without its newline
    (:func:`rest_of_line_being_written`). On a file system without locks (some network and
    FUSE mounts) the lines are appended unlocked, as on Windows: never lost for want of one."""
    try:
        _lock_file(file)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        _unlock_file(file)


def _last_byte(file: IO[bytes], fd: int, size: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, 1, size - 1)
    with open(file.name, "rb") as reader:  # no pread on Windows
        reader.seek(size - 1)
        return reader.read(1)


def encode_trace(trace: Trace) -> bytes:
    """A trace's JSON line (without the newline). A trace holding what JSON cannot (a lone
    surrogate, an object of no JSON type, a cycle: possible in a trace built by hand) is
    converted with :func:`~agenteval_core.plain` first, so it is written, not lost. A line
    over :data:`MAX_LINE_BYTES`, which no reader would take, has its longest strings cut
    until it fits (see :func:`fit_line`)."""
    try:
        line = trace.json_bytes()
    except (PydanticSerializationError, ValueError, RecursionError):
        line = Trace.model_validate(plain(trace)).json_bytes()
    return fit_line(line) if len(line) > MAX_LINE_BYTES else line


if sys.platform != "win32":
    import fcntl

    def _lock_file(file: IO[bytes]) -> None:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX)

    def _unlock_file(file: IO[bytes]) -> None:
        fcntl.flock(file.fileno(), fcntl.LOCK_UN)

    def _share_lock(file: IO[bytes], timeout: float) -> bool:
        """Take a shared lock on ``file`` within ``timeout`` seconds; whether it was taken
        (never on a file system without locks)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(file.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
                return True
            except BlockingIOError:  # a writer is appending a line: a few ms at most
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.002)
            except OSError:
                return False

else:  # no flock on Windows: there, processes sharing a capture may interleave split writes

    def _lock_file(file: IO[bytes]) -> None:
        pass

    def _unlock_file(file: IO[bytes]) -> None:
        pass

    def _share_lock(file: IO[bytes], timeout: float) -> bool:
        return False


def _line_error(path: str, number: int, line: bytes, exc: ValidationError) -> CaptureFormatError:
    error = exc.errors(include_url=False)[0]
    location = _excerpt(".".join(str(part) for part in error["loc"])) or None
    message = _excerpt(str(error["msg"]), 300)
    if error["type"] == "json_invalid" and not line.endswith(b"\n"):
        return CaptureFormatError(
            path, number, None, "truncated last line (the writer stopped mid-line)", truncated=True
        )
    if error["type"] == "json_invalid" and "EOF while parsing" in message:
        # a later writer closed the fragment off with a newline before appending its own line
        return CaptureFormatError(
            path, number, None, "truncated line (its writer stopped mid-line)", truncated=True
        )
    if line.lstrip().startswith(b"[") and error["type"] in ("json_invalid", "model_type"):
        return CaptureFormatError(
            path, number, None, "a JSON array, not JSON Lines: write one trace object per line"
        )
    if error["type"] == "json_invalid":
        return CaptureFormatError(path, number, None, f"not valid JSON ({message})")
    if isinstance((error.get("ctx") or {}).get("error"), NewerVersionError):
        return SchemaVersionError(path, number, location, message.removeprefix("Value error, "))
    if error["type"] == "model_type":
        return CaptureFormatError(path, number, None, "a line must be one JSON object (a trace)")
    return CaptureFormatError(path, number, location, message.removeprefix("Value error, "))


MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest capture line read (64 MiB): a longer one is refused before it is parsed, so a
hostile or broken file cannot take the reader's memory. The writer never writes a longer
one: it cuts the trace's longest strings until the line fits (:func:`fit_line`)."""

_CHUNK = 1024 * 1024
_BOM = b"\xef\xbb\xbf"


SHORTEST_CUT = 100
"""Bytes :func:`fit_line` keeps of a string at least, however many strings a line holds."""


def fit_line(line: bytes, limit: int = MAX_LINE_BYTES) -> bytes:
    """A trace's JSON line cut to at most ``limit`` bytes (:func:`fit_json`): its longest
    strings are cut to one length, each ending in the redactor's visible marker with its
    original size (``…[truncated: N characters in all]``). Ids, names and every value
    shorter than that length stay whole, so the trace reads back with all its spans and
    calls. A run of hundreds of large tool results (pages read in full, the redactor's
    100,000 characters each) otherwise wrote a line that every reader refuses.

    A line that holds more strings than fit at :data:`SHORTEST_CUT` bytes each is returned
    as cut as far as that goes (and logged): ``read_capture(max_line_bytes=...)`` reads it.
    """
    if len(line) <= limit:
        return line
    fitted = fit_json(
        line, limit, lambda data: json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    )
    data = fitted.data
    logger.warning(
        "trace %s: its capture line of %s bytes is over the %s bytes a reader takes; its %d "
        "longest strings are cut to about %s bytes each, ending in '…[truncated: N "
        "characters in all]', so it can be read back%s",
        data.get("id") if isinstance(data, dict) else None,
        f"{len(line):,}",
        f"{limit:,}",
        fitted.cut,
        f"{fitted.level:,.0f}",
        "" if fitted.fits else f" (still {len(fitted.encoded):,} bytes: too many strings)",
    )
    return fitted.encoded


class FittedJson(NamedTuple):
    """What :func:`fit_json` made of a JSON text."""

    encoded: bytes
    """The value encoded again, its longest strings cut."""
    data: Any
    """The value as cut."""
    cut: int
    """How many strings were cut."""
    level: float
    """The length in bytes they were cut to."""
    fits: bool
    """Whether ``encoded`` is within the limit: not when the value holds more strings than
    fit at :data:`SHORTEST_CUT` bytes each, or its keys, numbers and short strings alone
    take more room."""


def fit_json(text: str | bytes, limit: int, encode: Callable[[Any], str]) -> FittedJson:
    """A JSON text over ``limit`` bytes, encoded again by ``encode`` with its longest string
    values cut to one length, the longest that makes it fit, each ending in the visible
    marker of its original size (``…[truncated: N characters in all]``). Keys, and every
    value shorter than that length, stay whole: what is cut is readable JSON that says
    where it was cut."""
    size = len(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    target = limit * 0.98  # the markers and JSON escapes the estimate leaves out
    encoded, level, cut = b"", float(SHORTEST_CUT), 0
    for attempt in range(8):
        if attempt:  # over by the markers' and escapes' bytes: aim lower, from the start
            target -= len(encoded) - limit + 1
        held = [json.loads(text)]  # held, so a text alone is cut like one inside
        strings: list[tuple[dict[str, object] | list[object], str | int, str, int]] = []
        _long_strings(held, strings)
        sizes = sorted((length for *_, length in strings), reverse=True)
        level = _water_level(sizes, excess=size - target)
        cut = 0
        for holder, key, string, length in strings:
            if length > level:
                holder[key] = cut_text(string, int(len(string) * level / length))  # type: ignore[index]
                cut += 1
        encoded = encode(held[0]).encode("utf-8", "surrogatepass")
        if len(encoded) <= limit or level <= SHORTEST_CUT:
            break
    return FittedJson(encoded, held[0], cut, level, len(encoded) <= limit)


def _long_strings(
    value: object,
    found: list[tuple[dict[str, object] | list[object], str | int, str, int]],
) -> None:
    """Every string value (not key) of ``value`` longer than :data:`SHORTEST_CUT` bytes,
    with where it is held and its size in UTF-8."""
    items: Iterable[tuple[str | int, object]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, item in items:
        if isinstance(item, str):
            if len(item) > SHORTEST_CUT // 4:
                encoded = len(item.encode("utf-8", "surrogatepass"))
                if encoded > SHORTEST_CUT:
                    found.append((value, key, item, encoded))
        else:
            _long_strings(item, found)


def _water_level(sizes: list[int], excess: float) -> float:
    """The length to cut strings of ``sizes`` (longest first) to so that together they
    shrink by ``excess``: the longest ones are cut to it, the others stay (never under
    :data:`SHORTEST_CUT`)."""
    removed_above = 0.0  # what cutting every string longer than sizes[i] to sizes[i] removes
    for index in range(1, len(sizes) + 1):
        floor = sizes[index] if index < len(sizes) else SHORTEST_CUT
        floor = max(floor, SHORTEST_CUT)
        removed = removed_above + (sizes[index - 1] - floor) * index
        if removed >= excess:
            return max(SHORTEST_CUT, floor + (removed - excess) / index)
        removed_above = removed
        if floor == SHORTEST_CUT:
            break
    return SHORTEST_CUT


def _excerpt(text: str, limit: int = 120) -> str:
    """At most ``limit`` characters of a text for an error message (a key name can be 1 MB)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def read_capture(
    path: str | os.PathLike[str],
    *,
    on_error: Callable[[CaptureFormatError], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    shard: tuple[int, int] | None = None,
) -> Iterator[Trace]:
    """Stream the traces of a capture file, or of a capture directory (its shards one after
    another, see ``CaptureWriter(shards=N)``), line by line.

    A bad line raises :class:`CaptureFormatError` (file, line number, field), or, when
    ``on_error`` is given, is passed to it and skipped, so every good line is still read. A
    truncated last line (a writer that died mid-line) is reported with ``truncated=True``
    after every complete line before it; a last line that a :class:`CaptureWriter` (of any
    process) is still appending is waited for and read whole, so a capture can be read while
    a service writes it. A line over ``max_line_bytes`` is refused without
    being held in memory whole. ``on_progress`` receives the bytes consumed per line.

    ``shard=(index, count)`` reads one of ``count`` parts of the capture, every session
    whole in one part: of a file, the lines :func:`line_shard` gives to part ``index`` (the
    others are skipped unparsed, their bad lines left to the part that reads them); of a
    capture directory, the shard files whose number is ``index`` modulo ``count``, the
    others not opened.
    """
    for _, trace in read_numbered(
        path,
        on_error=on_error,
        on_progress=on_progress,
        max_line_bytes=max_line_bytes,
        shard=shard,
    ):
        yield trace


def read_in_run_order(
    path: str | os.PathLike[str], *, on_error: Callable[[CaptureFormatError], None] | None = None
) -> Iterator[Trace]:
    """:func:`read_capture` in the order the runs happened, for what goes by it (a run's
    earlier turns, a later run of the same request): a file's traces as written; a capture
    directory's shards merged by start time, each shard's own order kept, so a session's
    turns stay in order. Read one after another, the shards would put a run before others
    that came first."""
    shards = [read_capture(part, on_error=on_error) for part in capture_parts(path)]
    return heapq.merge(*shards, key=_started) if len(shards) > 1 else shards[0]


def runs_with_turns(
    path: str | os.PathLike[str],
    *,
    keep: int | None,
    on_error: Callable[[CaptureFormatError], None] | None = None,
) -> Iterator[tuple[Trace, deque[dict[str, Any]], int]]:
    """Each run of a capture once, in run order (:func:`read_in_run_order`; a line read
    twice is one run), with the earlier turns of its session as they stand when it is read
    and how many turns came before it, kept or not. The turns are ``{"input", "output"}``,
    oldest first, the last ``keep`` of them (``None``: all); a run with no session has none.
    A run joins its session's turns when the next run is asked for: what reads the turns
    reads them before that. A run that goes on from its session's last run (resumed after
    a pause for a human: :data:`RESUMES_TRACE_ID`) is that turn, not one after it: it takes
    its place."""
    earlier: dict[str, deque[dict[str, Any]]] = {}
    told: dict[str, int] = {}
    last: dict[str, str] = {}  # the trace id of each session's last turn
    read: dict[str, dict[str, int]] = {}
    sessionless = RecentRuns()
    for trace in read_in_run_order(path, on_error=on_error):
        session = trace.session_id
        if read_again(read.setdefault(session, {}) if session else sessionless, trace):
            continue
        if not session:
            yield trace, deque(), 0
            continue
        turns = earlier.setdefault(session, deque(maxlen=keep))
        before = told.get(session, 0)
        if before and trace.metadata.get(RESUMES_TRACE_ID) == last[session]:
            before -= 1  # the paused run's turn, which this run answers
            if turns:
                turns.pop()
        told[session], last[session] = before + 1, trace.id
        yield trace, turns, before
        turns.append({"input": trace.input, "output": trace.output})


@contextlib.contextmanager
def skipping_bad_lines() -> Iterator[list[CaptureFormatError]]:
    """The lines of a capture a reader skips (pass the list's ``append`` as ``on_error``),
    said once when the reading ends: how many, and the first. For what reads a capture
    beside its main input (a report's drill-down, calibration labels, a comparison): it
    goes on without them, as a replay does, where a strict read would refuse a capture for
    the torn last line that every agent killed mid-write leaves."""
    skipped: list[CaptureFormatError] = []
    yield skipped
    if skipped:
        logger.warning(
            "agenteval: %d capture line(s) could not be read and were skipped, as a replay "
            "skips them; the first: %s",
            len(skipped),
            skipped[0],
        )


def _started(trace: Trace) -> float:
    return -math.inf if trace.start_time is None else trace.start_time


LINES_PER_FILE = 1 << 40
"""A trace's place in a capture directory is its shard's number × this + its line number."""


def read_numbered(
    path: str | os.PathLike[str],
    *,
    on_error: Callable[[CaptureFormatError], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    shard: tuple[int, int] | None = None,
) -> Iterator[tuple[int, Trace]]:
    """:func:`read_capture`, each trace with its place in capture order: the number of the
    line it was read from (in a capture directory, plus its shard's number ×
    :data:`LINES_PER_FILE`)."""
    if shard is not None and not 0 <= shard[0] < shard[1]:
        raise ValueError(f"shard must be (index, count) with 0 <= index < count, got {shard}")
    files = capture_parts(path)
    directory = Path(path).is_dir()  # sharded by file, else by line
    for index, file in enumerate(files):
        if shard is not None and directory and index % shard[1] != shard[0]:
            continue
        offset = index * LINES_PER_FILE
        by_line = None if directory else shard
        for number, trace in _read_file(file, on_error, on_progress, max_line_bytes, by_line):
            yield offset + number, trace


def _read_file(
    path: Path,
    on_error: Callable[[CaptureFormatError], None] | None,
    on_progress: Callable[[int], None] | None,
    max_line_bytes: int,
    shard: tuple[int, int] | None,
) -> Iterator[tuple[int, Trace]]:
    name = os.fspath(path)
    try:
        handle = open(path, "rb")  # noqa: SIM115  (closed in finally; this is a generator)
    except FileNotFoundError:
        raise CaptureError(f"{name}: no such capture file") from None
    try:
        lines = split_lines(handle, max_line_bytes, on_progress)
        if shard is not None:
            lines = (item for item in lines if line_shard(item[1], item[0], shard[1]) == shard[0])
        yield from parse_lines(name, lines, on_error, max_line_bytes)
    finally:
        handle.close()


def parse_lines(
    name: str,
    lines: Iterable[tuple[int, bytes, int]],
    on_error: Callable[[CaptureFormatError], None] | None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[tuple[int, Trace]]:
    """The traces of capture lines given as :func:`split_lines` gives them, each with its
    line number; each line's problems raised, or passed to ``on_error``."""
    for number, line, oversize in lines:
        problems, trace = parse_line(name, number, line, oversize, max_line_bytes)
        for problem in problems:
            if on_error is None:
                raise problem
            on_error(problem)
        if trace is not None:
            yield number, trace


def split_lines(
    handle: IO[bytes],
    max_line_bytes: int = MAX_LINE_BYTES,
    on_progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, bytes, int]]:
    """A capture's lines as ``(number, line, oversize)``, numbered from 1. A line over
    ``max_line_bytes`` is read past a chunk at a time, never held whole: its first bytes come
    with ``oversize``, its full size (0 for every other line)."""
    number = 0
    while line := handle.readline(max_line_bytes + 1):
        number += 1
        if on_progress is not None:
            on_progress(len(line))
        if len(line) <= max_line_bytes and not line.endswith(b"\n"):
            rest = rest_of_line_being_written(handle, max_line_bytes + 1 - len(line))
            if on_progress is not None and rest:
                on_progress(len(rest))
            line += rest
        oversize = 0
        if len(line) > max_line_bytes and not line.endswith(b"\n"):
            oversize = len(line) + _skip_rest_of_line(handle, on_progress)
        yield number, line, oversize


LAST_LINE_WAIT = 5.0
"""Seconds a reader waits for a capture's writer to finish the line it is appending."""


def rest_of_line_being_written(handle: IO[bytes], limit: int) -> bytes:
    """The rest of a last line read without its newline: a capture or results file being
    written (a service replayed or reported on while it runs) ends so whenever a writer is
    mid-line. agenteval's writers append holding an exclusive lock on the file
    (:func:`appending`), so once this reader holds a shared one, a line they were appending
    is whole; a line still without its newline is
    torn (its writer stopped mid-line). Without the lock (no ``flock``, a writer stuck
    holding it for :data:`LAST_LINE_WAIT` seconds) the rest is read as it stands."""
    locked = _share_lock(handle, LAST_LINE_WAIT)
    try:
        return handle.readline(limit)
    finally:
        if locked:
            _unlock_file(handle)


def parse_line(
    name: str,
    number: int,
    line: bytes,
    oversize: int = 0,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> tuple[list[CaptureFormatError], Trace | None]:
    """One capture line read tolerantly: what is wrong with it (in the order it is found)
    and the trace it holds, if any. Every reader of captures (one process, workers, Ray)
    parses lines here, so bad, torn and glued lines are reported and recovered alike."""
    if oversize:
        return [
            CaptureFormatError(
                name,
                number,
                None,
                f"line of {oversize:,} bytes is over the {max_line_bytes:,}-byte limit; skipped",
            )
        ], None
    if not line.strip():
        return [], None
    if line.startswith(_BOM):  # an editor or a Windows tool wrote one: not data
        line = line[len(_BOM) :]
    try:
        # without the newline, a fragment closed off by a later writer reads as cut short,
        # like a torn last line
        text = line.rstrip(b"\r\n").decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":  # cut inside a character
            problem = CaptureFormatError(
                name, number, None, "truncated line (its writer stopped mid-line)", truncated=True
            )
        else:
            problem = CaptureFormatError(
                name, number, None, "not UTF-8 text (is this a capture file?)"
            )
        return [problem], None
    try:
        return [], Trace.model_validate_json(text)
    except ValidationError as exc:
        glued = _glued_trace(text) if exc.errors()[0]["type"] == "json_invalid" else None
        if glued is None:
            return [_line_error(name, number, line, exc)], None
    # another writer's whole line glued to a torn fragment: the fragment is lost, the line
    # after it is recovered
    fragment = CaptureFormatError(
        name,
        number,
        None,
        "a fragment torn by a writer that stopped mid-line; the trace written after it on "
        "the same line was recovered",
        truncated=True,
    )
    return [fragment], glued


# agenteval's writer puts a trace's keys in field order, so its session is read from the
# start of the line, without parsing the rest
_SESSION_KEY = re.compile(
    rb'\{"schema_version":\d+,"id":"(?:[^"\\]|\\.)*","session_id":("(?:[^"\\]|\\.)*"|null)'
)


def line_shard(line: bytes, number: int, count: int) -> int:
    """Which of ``count`` shards capture line ``line`` (line number ``number``) belongs to.

    A trace's session id picks its shard (a stable hash, the same in every process), so
    every trace of a session lands in one shard, in order. Lines written by agenteval are
    placed from their first bytes; any other line is parsed as JSON for its session id. A
    line with no session, or that is not a JSON object, goes by its line number.
    """
    session = line_session(line)
    return session_shard(session, count) if session else number % count


def line_session(line: bytes) -> bytes | None:
    """The UTF-8 of a capture line's session id, or None. A whole trace glued after a torn
    fragment is what the line yields (see :func:`parse_line`), so its session counts."""
    glued = line.rfind(_TRACE_START_BYTES, 1)
    match = _SESSION_KEY.match(line, glued if glued > 0 else 0)
    try:
        if match is not None:
            raw = match.group(1)
            if b"\\" not in raw:
                return None if raw == b"null" else raw[1:-1]
            session = json.loads(raw)  # an escape: the id's own UTF-8, as below
        else:
            found = json.loads(line)
            session = found.get("session_id") if isinstance(found, dict) else None
    except (ValueError, RecursionError):  # not JSON: the line goes by its number
        return None
    return session.encode("utf-8", "surrogatepass") if isinstance(session, str) else None


_TRACE_START = '{"schema_version":'
_TRACE_START_BYTES = _TRACE_START.encode()


def _glued_trace(text: str) -> Trace | None:
    """The last whole trace in a line that holds a torn fragment and then a whole trace."""
    start = text.rfind(_TRACE_START)
    if start <= 0:
        return None
    try:
        return Trace.model_validate_json(text[start:])
    except ValidationError:
        return None


def _skip_rest_of_line(handle: IO[bytes], on_progress: Callable[[int], None] | None) -> int:
    """Read past the rest of an oversized line a chunk at a time; return how many bytes."""
    skipped = 0
    while chunk := handle.readline(_CHUNK):
        skipped += len(chunk)
        if on_progress is not None:
            on_progress(len(chunk))
        if chunk.endswith(b"\n"):
            break
    return skipped
