"""Arbitrary Python objects → JSON-safe values, with bounded work, for traces to hold.

Adapters record whatever their framework hands them: tool results that contain themselves,
graphs of shared objects, text with lone surrogates, integers of thousands of digits. Each of
these can stop a trace from being written (or read back), and a naive recursive copy of a
shared graph expands it exponentially. :func:`plain` converts once, visiting each object
once, within a budget of values and characters, so every trace that is scored can also be
captured and read.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

__all__ = [
    "MAX_VALUE_CHARS",
    "MAX_VALUE_NODES",
    "TRUNCATED",
    "cut_text",
    "cut_within",
    "plain",
    "safe_int",
    "safe_text",
    "truncated",
]

MAX_VALUE_NODES = 1_000_000
"""Values (strings, numbers, list items, dict entries) one :func:`plain` call produces at
most; past that, what is left is replaced by a marker."""

MAX_VALUE_CHARS = 64 * 1024 * 1024
"""Characters of text one :func:`plain` call produces at most (the reader's line limit)."""

_MAX_REPR = 10_000
_SAFE_INT = 2**63
_SURROGATE = re.compile("[\ud800-\udfff]")


TRUNCATED = re.compile(r"…\[truncated: (\d+) characters in all\]\Z")
"""The marker :func:`truncated` ends a cut string with; its group is the original size."""


def truncated(kept: str, size: int) -> str:
    """``kept``, the start of a text of ``size`` characters, ending in the visible marker of
    that size: how every string agenteval cuts ends, so a reader knows it was cut."""
    return f"{kept}…[truncated: {size} characters in all]"


def cut_text(text: str, keep: int) -> str:
    """``text`` cut to its first ``keep`` characters, ending in the marker of its original
    size (an earlier cut's, when it was cut before)."""
    earlier = TRUNCATED.search(text)
    if earlier is not None:
        return truncated(text[: min(keep, earlier.start())], int(earlier[1]))
    return truncated(text[:keep], len(text))


def cut_within(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: whole when it fits, else its start ending in
    the marker of its original size (as it is when ``limit`` leaves no room for one)."""
    if len(text) <= limit:
        return text
    cut = cut_text(text, 0)
    if len(cut) > limit:
        return text
    return cut_text(text, limit - len(cut))


def safe_text(text: str) -> str:
    """``text`` with lone surrogates (which UTF-8 cannot encode) replaced by U+FFFD;
    ASCII text is returned as is without being scanned."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    # a correct pair (from a UTF-16 source) becomes its character; a lone half becomes U+FFFD
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def safe_int(value: int) -> int | str:
    """Integers outside 64 bits become strings (JSON readers refuse or round them); past
    Python's 4,300-digit ``str`` limit, in hexadecimal, which has no limit and loses nothing."""
    if -_SAFE_INT <= value < _SAFE_INT:
        return value
    try:
        return str(value)
    except ValueError:
        return hex(value)


def _repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # a hostile __repr__
        return f"<{type(value).__name__} object: repr failed with {type(exc).__name__}>"
    if len(text) > _MAX_REPR:
        text = truncated(text[:_MAX_REPR], len(text))
    return safe_text(text)


class _Converter:
    def __init__(
        self, convert: Callable[[Any], Any] | None, max_nodes: int, max_chars: int
    ) -> None:
        self.convert = convert
        self.nodes = max_nodes
        self.chars = max_chars
        # id → (converted value, values in it, characters in it); ``alive`` holds the
        # originals so no id is reused by a new object while the conversion runs
        self.done: dict[int, tuple[Any, int, int]] = {}
        self.alive: list[Any] = []
        self.open: set[int] = set()

    def over(self, nodes: int, chars: int) -> bool:
        if nodes > self.nodes or chars > self.chars:
            self.nodes = self.chars = -1  # spent: every later value is a marker too
            return True
        self.nodes -= nodes
        self.chars -= chars
        return False

    def value(self, value: Any) -> tuple[Any, int, int]:
        """The converted value, and how many values and characters it holds."""
        if isinstance(value, str):
            return (safe_text(value), 1, len(value)) if not self.over(1, len(value)) else _cut()
        if value is None or isinstance(value, bool | int | float):
            scalar = value if value is None or isinstance(value, bool) else _number(value)
            return (scalar, 1, 0) if not self.over(1, 0) else _cut()
        key = id(value)
        if key in self.open:
            return ("[cycle: a value that contains itself]", 1, 0)
        known = self.done.get(key)
        if known is not None:  # a shared object: converted once, its size charged again
            return known if not self.over(known[1], known[2]) else _cut()
        self.open.add(key)
        try:
            result = self.container(value)
        finally:
            self.open.discard(key)
        self.done[key] = result
        self.alive.append(value)
        return result

    def container(self, value: Any) -> tuple[Any, int, int]:
        if isinstance(value, dict):
            if self.over(1, 0):
                return _cut()
            converted: dict[str, Any] = {}
            nodes, chars = 1, 0
            for key, item in value.items():
                name = safe_text(key) if isinstance(key, str) else _key(key)
                converted[name], item_nodes, item_chars = self.value(item)
                nodes, chars = nodes + item_nodes, chars + item_chars + len(name)
            return converted, nodes, chars
        if isinstance(value, list | tuple | set | frozenset):
            if self.over(1, 0):
                return _cut()
            items = []
            nodes, chars = 1, 0
            for item in value:
                converted_item, item_nodes, item_chars = self.value(item)
                items.append(converted_item)
                nodes, chars = nodes + item_nodes, chars + item_chars
            return items, nodes, chars
        replacement = self.replace(value)
        if replacement is value:
            text = _repr(value)
            return (text, 1, len(text)) if not self.over(1, len(text)) else _cut()
        return self.value(replacement)

    def replace(self, value: Any) -> Any:
        """What stands for an object that is not JSON: the adapter's conversion, a pydantic
        model's fields, a dataclass's fields that are set, else ``value`` itself (its
        ``repr`` is used)."""
        if self.convert is not None:
            try:
                replacement = self.convert(value)
            except Exception:
                replacement = value
            if replacement is not value:
                return replacement
        if isinstance(value, BaseModel):
            return {name: getattr(value, name, None) for name in type(value).model_fields}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            # e.g. LangGraph's Command: its set fields read better than its repr
            fields = (
                (field.name, getattr(value, field.name, None))
                for field in dataclasses.fields(value)
            )
            return {name: item for name, item in fields if item is not None}
        dump = getattr(value, "model_dump", None)
        if callable(dump):
            try:
                return dump()
            except Exception:
                return value
        return value


_CUT = "[cut: over agenteval's budget for one value; see MAX_VALUE_NODES]"


def _cut() -> tuple[Any, int, int]:
    return _CUT, 1, 0


def _number(value: int | float) -> int | float | str:
    """A number as JSON holds it (a subclass, a NumPy float, as the plain type)."""
    return float(value) if isinstance(value, float) else safe_int(int(value))


def _key(key: Any) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return str(safe_int(key))
    try:
        return safe_text(str(key))
    except Exception:
        return _repr(key)


def plain(
    value: Any,
    convert: Callable[[Any], Any] | None = None,
    *,
    max_nodes: int = MAX_VALUE_NODES,
    max_chars: int = MAX_VALUE_CHARS,
) -> Any:
    """A JSON-safe copy of ``value``, made with bounded work.

    Strings, numbers, booleans and ``None`` are kept; dicts (keys as strings), lists, tuples
    and sets become dicts and lists; a pydantic model becomes its fields, a dataclass its
    fields that are not ``None``; any other object
    becomes what ``convert`` returns for it (converted in turn), else its ``repr`` (cut at
    10,000 characters). Lone surrogates become U+FFFD; integers beyond 64 bits become
    strings (decimal, or hexadecimal past 4,300 digits). An object met twice is converted
    once; one that contains itself becomes a ``[cycle: …]`` marker at the repeat. Past
    ``max_nodes`` values or ``max_chars`` characters, the rest becomes a ``[cut: …]``
    marker, so a graph of shared objects cannot expand without bound.
    """
    return _Converter(convert, max_nodes, max_chars).value(value)[0]
