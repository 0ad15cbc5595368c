"""Span files in, spans out: every JSON shape OpenTelemetry tools write, read into one form.

Reads, from a file, text or parsed value:
- OTLP JSON (an ``ExportTraceServiceRequest``) in the spec's camelCase or in the snake_case
  protobuf field names (Phoenix's ``/spans/otlpv1`` API), hex or base64 ids;
- one document or span per line (JSON Lines), or documents one after another (what the
  SDK's console/file exporter writes: ``ReadableSpan.to_json()``, pretty-printed);
- Phoenix's span API (``{"data": [{"context": {...}, "attributes": {...}}]}``).

A file is read a piece at a time (:class:`SpanSource`), so memory holds the document being
read, not the file.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import io
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar

from opentelemetry.sdk.trace import ReadableSpan

from agenteval_core import CaptureError, refuse_compressed

__all__ = ["SPANS", "TRACE_IDS", "RawSpan", "SpanSource", "otlp_json"]

T = TypeVar("T")


@dataclass
class RawSpan:
    """One span, whatever file it came from: ids in lowercase hex, times in nanoseconds,
    attributes flat (``llm.model_name``), values as Python values."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start_ns: int | None
    end_ns: int | None
    attributes: dict[str, Any]
    error: bool = False
    status_message: str = ""
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


# --- encoding ---------------------------------------------------------------------------


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _attributes(attributes: Any) -> list[dict[str, Any]]:
    return [{"key": key, "value": _value(value)} for key, value in (attributes or {}).items()]


def otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """Finished SDK spans (e.g. from an in-memory exporter) in the OTLP JSON encoding."""
    encoded = []
    for span in spans:
        context = span.get_span_context()
        assert context is not None  # a finished SDK span always has one
        encoded.append(
            {
                "traceId": f"{context.trace_id:032x}",
                "spanId": f"{context.span_id:016x}",
                "parentSpanId": f"{span.parent.span_id:016x}" if span.parent else "",
                "name": span.name,
                "startTimeUnixNano": str(span.start_time),
                "endTimeUnixNano": str(span.end_time),
                "attributes": _attributes(span.attributes),
                "events": [
                    {
                        "name": e.name,
                        "timeUnixNano": str(e.timestamp),
                        "attributes": _attributes(e.attributes),
                    }
                    for e in span.events
                ],
                "status": {
                    "code": span.status.status_code.value,
                    "message": span.status.description or "",
                },
            }
        )
    return {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "agenteval"}, "spans": encoded}]}]}


# --- decoding ---------------------------------------------------------------------------


def _get(raw: dict[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    return raw[camel] if camel in raw else raw.get(snake, default)


def _hex_id(value: Any, width: int) -> str:
    """OTLP JSON ids are hex; protobuf's JSON mapping (and some exporters) write base64;
    the SDK's ``to_json`` writes ``0x``-prefixed hex."""
    if not value:
        return ""
    text = str(value)
    if text.startswith("0x"):
        text = text[2:]
    if len(text) == width:
        try:
            int(text, 16)
            return text.lower()
        except ValueError:
            pass
    try:
        decoded = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return text
    return decoded.hex() if len(decoded) * 2 == width else text


def _any_value(value: dict[str, Any]) -> Any:
    """An OTLP ``AnyValue``; some writers (Phoenix) list every field with nulls but one."""
    for camel, snake in (
        ("stringValue", "string_value"),
        ("boolValue", "bool_value"),
        ("doubleValue", "double_value"),
    ):
        if _get(value, camel, snake) is not None:
            return _get(value, camel, snake)
    if _get(value, "intValue", "int_value") is not None:
        return int(_get(value, "intValue", "int_value"))
    array = _get(value, "arrayValue", "array_value")
    if array is not None:
        return [_any_value(v) for v in array.get("values") or []]
    kvlist = _get(value, "kvlistValue", "kvlist_value")
    if kvlist is not None:
        return {kv["key"]: _any_value(kv.get("value") or {}) for kv in kvlist.get("values") or []}
    return None


def _flat(attributes: Any, prefix: str = "") -> dict[str, Any]:
    """OTLP key/value lists or (Phoenix, SDK ``to_json``) dicts, nested or not, as one flat
    dict with dotted keys."""
    if isinstance(attributes, list):
        return {a["key"]: _any_value(a.get("value") or {}) for a in attributes}
    flat: dict[str, Any] = {}
    for key, value in (attributes or {}).items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _nanos(value: Any) -> int | None:
    if value in (None, "", 0, "0"):
        return None
    if isinstance(value, int | float) or str(value).isdigit():
        return int(value)
    moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    seconds = int(moment.timestamp())
    return seconds * 1_000_000_000 + moment.microsecond * 1000


def _is_error(code: Any) -> bool:
    return code in (2, "2", "ERROR", "STATUS_CODE_ERROR", "StatusCode.ERROR")


def _otlp_span(raw: dict[str, Any]) -> RawSpan:
    status = raw.get("status") or {}
    return RawSpan(
        trace_id=_hex_id(_get(raw, "traceId", "trace_id"), 32),
        span_id=_hex_id(_get(raw, "spanId", "span_id"), 16),
        parent_id=_hex_id(_get(raw, "parentSpanId", "parent_span_id"), 16),
        name=str(raw.get("name", "")),
        start_ns=_nanos(_get(raw, "startTimeUnixNano", "start_time_unix_nano")),
        end_ns=_nanos(_get(raw, "endTimeUnixNano", "end_time_unix_nano")),
        attributes=_flat(raw.get("attributes")),
        error=_is_error(status.get("code")),
        status_message=str(status.get("message") or ""),
        events=[(e.get("name", ""), _flat(e.get("attributes"))) for e in raw.get("events") or []],
    )


def _context_span(raw: dict[str, Any]) -> RawSpan:
    """The SDK's ``ReadableSpan.to_json()`` and Phoenix's span API: a ``context`` object."""
    context = raw["context"]
    status = raw.get("status") or {}
    code = status.get("status_code", raw.get("status_code"))
    return RawSpan(
        trace_id=_hex_id(context.get("trace_id"), 32),
        span_id=_hex_id(context.get("span_id"), 16),
        parent_id=_hex_id(raw.get("parent_id"), 16),
        name=str(raw.get("name", "")),
        start_ns=_nanos(raw.get("start_time")),
        end_ns=_nanos(raw.get("end_time")),
        attributes=_flat(raw.get("attributes")),
        error=_is_error(code),
        status_message=str(status.get("description") or raw.get("status_message") or ""),
        events=[(e.get("name", ""), _flat(e.get("attributes"))) for e in raw.get("events") or []],
    )


def _otlp_trace_id(raw: dict[str, Any]) -> str:
    return _hex_id(_get(raw, "traceId", "trace_id"), 32)


def _context_trace_id(raw: dict[str, Any]) -> str:
    return _hex_id(raw["context"].get("trace_id"), 32)


@dataclass(frozen=True)
class _Reading(Generic[T]):
    """What a span of each shape is read into: a whole span, or its trace id alone."""

    otlp: Callable[[dict[str, Any]], T]
    context: Callable[[dict[str, Any]], T]


SPANS = _Reading(_otlp_span, _context_span)
TRACE_IDS = _Reading(_otlp_trace_id, _context_trace_id)


def _spans_of(document: Any, where: str, reading: _Reading[T]) -> Iterator[T]:
    if isinstance(document, list):
        for item in document:
            yield from _spans_of(item, where, reading)
        return
    if not isinstance(document, dict):
        raise CaptureError(f"{where}: expected a JSON object, got {type(document).__name__}")
    resources = _get(document, "resourceSpans", "resource_spans")
    if resources is not None:
        for resource in resources:
            scopes = (
                _get(resource, "scopeSpans", "scope_spans")
                or _get(resource, "instrumentationLibrarySpans", "instrumentation_library_spans")
                or []
            )
            for scope in scopes:
                for raw in scope.get("spans") or []:
                    yield reading.otlp(raw)
    elif "data" in document and isinstance(document["data"], list):
        yield from _spans_of(document["data"], where, reading)
    elif "context" in document and isinstance(document["context"], dict):
        yield reading.context(document)
    elif _get(document, "traceId", "trace_id") is not None and (
        _get(document, "spanId", "span_id") is not None
    ):
        yield reading.otlp(document)
    else:
        keys = ", ".join(sorted(document)[:6]) or "none"
        raise CaptureError(
            f"{where}: not an OpenTelemetry span or OTLP document (keys: {keys}); expected "
            "OTLP JSON (resourceSpans), JSON Lines of spans, or the SDK's span JSON"
        )


_SPACE = re.compile(r"\s*")
PIECE = 1 << 20
"""Bytes read from a span file at once: memory holds the document being read and about
this much more, never the whole file (a collector's file grows to gigabytes)."""
_NEAR_END = 8
"""A JSON error this close to the end of what was read may be a document cut by the piece's
end (a ``\\uXXXX`` escape is the longest thing cut so): more is read before it counts."""


def _documents(
    stream: BinaryIO, where: str, on_progress: Callable[[int], None] | None = None
) -> Iterator[tuple[Any, str]]:
    """JSON values one after another (one document, JSON Lines, or pretty-printed spans), read
    a piece at a time, each with its place (``where:line``); ``on_progress`` is given the
    bytes of each piece."""
    json_decoder = json.JSONDecoder()
    # utf-8-sig: a byte order mark (some Windows tools write one) is no JSON
    utf8 = codecs.getincrementaldecoder("utf-8-sig")()
    text, position, ended = "", 0, False
    line, counted = 1, 0  # the line of ``counted``: newlines are counted once, as it moves on
    while True:
        position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
        line += text.count("\n", counted, position)
        counted = position
        if position < len(text):
            try:
                value, end = json_decoder.raw_decode(text, position)
            except json.JSONDecodeError as exc:
                cut = exc.pos >= len(text) - _NEAR_END or exc.msg.startswith("Unterminated")
                if ended or not cut:
                    raise CaptureError(
                        f"{where}:{line}: not JSON ({exc.msg}); expected OTLP JSON or JSON "
                        "Lines of spans"
                    ) from exc
            else:
                yield value, f"{where}:{line}"
                position = end
                continue
        elif ended:
            return
        # at least as much again as the document begun: one cut many times is read in few tries
        piece = stream.read(max(PIECE, len(text) - position))
        if on_progress is not None:
            on_progress(len(piece))
        try:
            more = utf8.decode(piece, final=not piece)
        except UnicodeDecodeError as exc:
            line += text.count("\n", position) + exc.object[: exc.start].count(b"\n")
            raise CaptureError(
                f"{where}:{line}: not UTF-8 (byte 0x{exc.object[exc.start]:02x}: {exc.reason}); "
                "OpenTelemetry span files are UTF-8 JSON"
            ) from None
        text, position, counted, ended = text[position:] + more, 0, 0, not piece


class SpanSource:
    """A span file, JSON text or parsed value, read document by document, as often as asked.

    Raises:
        CaptureError: ``source`` names no file, or a compressed one.
    """

    def __init__(self, source: str | os.PathLike[str] | dict[str, Any] | list[Any]) -> None:
        self._value: dict[str, Any] | list[Any] | None = None
        self._path: Path | None = None
        self._text = ""
        if isinstance(source, dict | list):
            self._value, self.where = source, "document"
            return
        looks_like_path = isinstance(source, os.PathLike) or not str(source).lstrip().startswith(
            ("{", "[")
        )
        if not looks_like_path:
            self._text, self.where = str(source), "text"
            return
        self._path, self.where = Path(source), str(source)
        if not self._path.is_file():
            raise CaptureError(f"{source}: no such file; pass an OTLP JSON or JSON Lines file")
        refuse_compressed(self._path)  # a collector's archived file: say how to read it

    def documents(
        self, reading: _Reading[T], on_progress: Callable[[int], None] | None = None
    ) -> Iterator[list[T]]:
        """The spans of each document, in file order, read as ``reading`` says (:data:`SPANS`
        or :data:`TRACE_IDS`); ``on_progress`` is given the bytes read since its last call.

        Raises:
            CaptureError: a document is not JSON or not spans (the message names the file
                and line).
        """
        if self._value is not None:
            yield list(_spans_of(self._value, self.where, reading))
            return
        stream = io.BytesIO(self._text.encode()) if self._path is None else self._path.open("rb")
        with stream:
            for value, at in _documents(stream, self.where, on_progress):
                yield list(_spans_of(value, at, reading))
