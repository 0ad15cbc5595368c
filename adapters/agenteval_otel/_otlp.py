"""Span files in, spans out: every JSON shape OpenTelemetry tools write, read into one form.

Reads, from a file, text or parsed value:
- OTLP JSON (an ``ExportTraceServiceRequest``) in the spec's camelCase or in the snake_case
  protobuf field names (Phoenix's ``/spans/otlpv1`` API), hex or base64 ids;
- one document or span per line (JSON Lines), or documents one after another (what the
  SDK's console/file exporter writes: ``ReadableSpan.to_json()``, pretty-printed);
- Phoenix's span API (``{"data": [{"context": {...}, "attributes": {...}}]}``).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from agenteval_core import CaptureError

__all__ = ["RawSpan", "otlp_json", "read_spans"]


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


def _spans_of(document: Any, where: str) -> Iterator[RawSpan]:
    if isinstance(document, list):
        for item in document:
            yield from _spans_of(item, where)
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
                    yield _otlp_span(raw)
    elif "data" in document and isinstance(document["data"], list):
        yield from _spans_of(document["data"], where)
    elif "context" in document and isinstance(document["context"], dict):
        yield _context_span(document)
    elif _get(document, "traceId", "trace_id") is not None and (
        _get(document, "spanId", "span_id") is not None
    ):
        yield _otlp_span(document)
    else:
        keys = ", ".join(sorted(document)[:6]) or "none"
        raise CaptureError(
            f"{where}: not an OpenTelemetry span or OTLP document (keys: {keys}); expected "
            "OTLP JSON (resourceSpans), JSON Lines of spans, or the SDK's span JSON"
        )


def _documents(text: str, where: str) -> Iterator[tuple[Any, str]]:
    """JSON values one after another: one document, JSON Lines, or pretty-printed spans."""
    decoder = json.JSONDecoder()
    position, length = 0, len(text)
    line, counted = 1, 0  # the line of ``counted``: newlines are counted once, as it moves on
    while True:
        while position < length and text[position].isspace():
            position += 1
        if position >= length:
            return
        line += text.count("\n", counted, position)
        counted = position
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise CaptureError(
                f"{where}:{line}: not JSON ({exc.msg}); expected OTLP JSON or JSON Lines of spans"
            ) from exc
        yield value, f"{where}:{line}"


def read_spans(source: str | os.PathLike[str] | dict[str, Any] | list[Any]) -> list[RawSpan]:
    """Every span in ``source``: a file path, JSON text, or an already parsed document."""
    if isinstance(source, dict | list):
        return list(_spans_of(source, "document"))
    path = Path(source)
    looks_like_path = isinstance(source, os.PathLike) or not str(source).lstrip().startswith(
        ("{", "[")
    )
    if looks_like_path:
        if not path.is_file():
            raise CaptureError(f"{source}: no such file; pass an OTLP JSON or JSON Lines file")
        text, where = path.read_text(encoding="utf-8"), str(source)
    else:
        text, where = str(source), "text"
    spans = [span for value, at in _documents(text, where) for span in _spans_of(value, at)]
    if not spans:
        raise CaptureError(f"{where}: holds no spans")
    return spans
