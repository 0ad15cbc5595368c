"""The earlier traces of one open session, as the engine keeps them for metrics."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

from ..schema._trace import Trace, text_of
from ..schema._unvalidated import unvalidated_with_defaults

__all__ = ["SessionHistory", "turns_as_history"]


class SessionHistory(Sequence[Trace]):
    """The earlier traces of one session, as metrics with ``uses_history`` see them.

    Indexes run over every trace seen, so a metric reports real positions, but only the last
    ``keep`` traces with a non-empty output are retained, which keeps memory flat over long
    sessions. Other positions read as empty traces. With ``fields``, a retained trace holds
    only those fields (and ``id`` and ``session_id``), the others left at their defaults.
    """

    _EMPTY = Trace(id="", output=None)

    def __init__(self, keep: int, fields: frozenset[str] | None = None) -> None:
        # keep=0 (no metric reads history) holds no trace at all: nothing for the garbage
        # collector to scan on every open session
        self._kept: deque[tuple[int, Trace]] = deque(maxlen=max(keep, 0))
        self._count = 0
        self.fields = None if fields is None else fields | {"id", "session_id"}

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Trace: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Trace]: ...
    def __getitem__(self, index: int | slice) -> Trace | Sequence[Trace]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        for position, trace in self._kept:
            if position == index:
                return trace
        return self._EMPTY

    def __iter__(self) -> Iterator[Trace]:
        return (self[i] for i in range(self._count))

    def frozen(self) -> SessionHistory:
        """The history as it stands, unchanged by later appends (a batch scores several
        traces of one session at once, each against the traces before it)."""
        copy = SessionHistory(0, self.fields)
        copy._kept = self._kept.copy()
        copy._count = self._count
        return copy

    def last_with_output(self, count: int) -> list[tuple[int, Trace]]:
        """The last ``count`` retained traces with a non-empty output, with their positions,
        oldest first (without reading every position, as indexing would)."""
        return list(self._kept)[-count:] if count > 0 else []

    def append(self, trace: Trace) -> None:
        """The session's next trace: counted, and kept when it has an output."""
        if self._kept.maxlen and text_of(trace.output).strip():
            if self.fields is not None:
                # a copy of the few fields read: the whole trace is freed now, while it is
                # still in the CPU's cache, not a thousand traces later
                # (the values of a validated trace, so validating them again changes nothing)
                trace = unvalidated_with_defaults(
                    Trace, {name: getattr(trace, name) for name in self.fields}
                )
            self._kept.append((self._count, trace))
        self._count += 1


def turns_as_history(turns: Sequence[Mapping[str, Any]]) -> list[Trace]:
    """A case's earlier turns (``{"input", "output"}``, oldest first) as the history its
    metrics read: a regression case replays the conversation it failed in, not a first turn
    (``loop_detection`` of the same answer again had nothing to compare it with)."""
    return [
        Trace(id=f"turn-{index}", input=turn.get("input"), output=turn.get("output"))
        for index, turn in enumerate(turns)
    ]
