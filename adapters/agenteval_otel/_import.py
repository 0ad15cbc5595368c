"""OTLP JSON → agenteval traces: spans from agenteval's exporter, OpenInference instrumentors
or instrumentors following the OpenTelemetry GenAI conventions."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from agenteval_core import CaptureError, Span, SpanKind, ToolCall, ToolSpec, Trace

__all__ = ["import_otlp_json"]

OPENINFERENCE_KINDS = {
    "AGENT": SpanKind.AGENT,
    "LLM": SpanKind.LLM,
    "TOOL": SpanKind.TOOL,
    "RETRIEVER": SpanKind.RETRIEVER,
    "CHAIN": SpanKind.CHAIN,
}
GENAI_OPERATIONS = {
    "invoke_agent": SpanKind.AGENT,
    "create_agent": SpanKind.AGENT,
    "chat": SpanKind.LLM,
    "text_completion": SpanKind.LLM,
    "generate_content": SpanKind.LLM,
    "execute_tool": SpanKind.TOOL,
}
_INTERNAL = ("agenteval.", "openinference.", "input.", "output.", "llm.", "tool.", "session.")


def _scalar(value: dict[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_scalar(v) for v in value["arrayValue"].get("values", [])]
    return None


def _decoded(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _kind(attributes: dict[str, Any], name: str) -> SpanKind:
    if "agenteval.span.kind" in attributes:
        return SpanKind(attributes["agenteval.span.kind"])
    if attributes.get("openinference.span.kind") in OPENINFERENCE_KINDS:
        return OPENINFERENCE_KINDS[attributes["openinference.span.kind"]]
    operation = attributes.get("gen_ai.operation.name") or name.split(" ")[0]
    return GENAI_OPERATIONS.get(operation, SpanKind.CHAIN)


def _requested_calls(attributes: dict[str, Any]) -> list[ToolCall]:
    if "agenteval.requested_tool_calls" in attributes:
        return [
            ToolCall.model_validate(c)
            for c in _decoded(attributes["agenteval.requested_tool_calls"])
        ]
    calls: dict[int, dict[str, Any]] = defaultdict(dict)
    prefix = "llm.output_messages.0.message.tool_calls."
    for key, value in attributes.items():
        if key.startswith(prefix):
            index, _, field = key[len(prefix) :].partition(".")
            calls[int(index)][field] = value
    return [
        ToolCall(
            id=fields.get("tool_call.id"),
            name=fields.get("tool_call.function.name", "tool"),
            arguments=_decoded(fields.get("tool_call.function.arguments", "{}")) or {},
        )
        for _, fields in sorted(calls.items())
    ]


def _span(raw: dict[str, Any]) -> tuple[Span, dict[str, Any]]:
    attributes = {a["key"]: _scalar(a["value"]) for a in raw.get("attributes", [])}
    kind = _kind(attributes, raw.get("name", ""))
    name = (
        attributes.get("agenteval.span.name")
        or attributes.get("gen_ai.tool.name")
        or attributes.get("tool.name")
        or attributes.get("gen_ai.agent.name")
        or raw.get("name", "span")
    )
    status = raw.get("status") or {}
    error = attributes.get("agenteval.error") or (
        status.get("message") or "error" if status.get("code") in (2, "STATUS_CODE_ERROR") else None
    )
    inputs = _decoded(attributes.get("agenteval.input", attributes.get("input.value")))
    output = _decoded(attributes.get("agenteval.output", attributes.get("output.value")))
    tool_call = None
    if kind is SpanKind.TOOL:
        arguments = _decoded(
            attributes.get("gen_ai.tool.call.arguments", attributes.get("input.value", "{}"))
        )
        result = (
            _decoded(attributes["gen_ai.tool.call.result"])
            if "gen_ai.tool.call.result" in attributes
            else output
        )
        tool_call = ToolCall(
            id=attributes.get("gen_ai.tool.call.id") or attributes.get("tool_call.id"),
            name=name,
            arguments=arguments if isinstance(arguments, dict) else {"input": arguments},
            result=result,
            error=error,
        )
    model = attributes.get("gen_ai.request.model") or attributes.get("llm.model_name")
    span_attributes = {
        key: value
        for key, value in attributes.items()
        if not key.startswith(_INTERNAL)
        and not key.startswith("gen_ai.tool.")
        and key not in ("gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.conversation.id")
    }
    if model and kind is SpanKind.LLM:
        span_attributes["gen_ai.request.model"] = model
    for ours, theirs in (
        ("input_tokens", "llm.token_count.prompt"),
        ("output_tokens", "llm.token_count.completion"),
    ):
        if theirs in attributes and f"gen_ai.usage.{ours}" not in span_attributes:
            span_attributes[f"gen_ai.usage.{ours}"] = attributes[theirs]
    span = Span(
        id=attributes.get("agenteval.span.id") or raw["spanId"],
        parent_id=attributes.get("agenteval.span.parent_id") or None,
        kind=kind,
        name=str(name),
        input=inputs,
        output=output,
        error=error,
        start_time=int(raw["startTimeUnixNano"]) / 1e9 if raw.get("startTimeUnixNano") else None,
        end_time=int(raw["endTimeUnixNano"]) / 1e9 if raw.get("endTimeUnixNano") else None,
        attributes=span_attributes,
        thought=attributes.get("agenteval.thought"),
        tool_call=tool_call,
        requested_tool_calls=_requested_calls(attributes) if kind is SpanKind.LLM else [],
    )
    return span, attributes


def import_otlp_json(source: str | os.PathLike[str] | dict[str, Any]) -> list[Trace]:
    """Traces from an OTLP JSON export (a file path, JSON text, or the parsed document).

    Spans are grouped by trace id and ordered by start time; the root span gives the trace's
    input, output, error and session (``gen_ai.conversation.id`` or OpenInference's
    ``session.id``). Spans written by :class:`OTelExporter` come back exactly.
    """
    if isinstance(source, dict):
        document = source
    else:
        text = (
            Path(source).read_text(encoding="utf-8") if Path(str(source)).exists() else str(source)
        )
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise CaptureError(f"{source}: not OTLP JSON ({exc})") from exc
    by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for raw in scope.get("spans", []):
                by_trace[raw["traceId"]].append(raw)
    traces = []
    for trace_id, raws in by_trace.items():
        raws.sort(key=lambda r: int(r.get("startTimeUnixNano") or 0))
        otel_ids = {raw["spanId"] for raw in raws}
        parsed = [(_span(raw), raw) for raw in raws]
        ids = {raw["spanId"]: span.id for (span, _), raw in parsed}
        for (span, _), raw in parsed:
            parent = raw.get("parentSpanId") or ""
            if span.parent_id is None and parent in otel_ids:
                span.parent_id = ids[parent]
        root_index = next(
            (
                i
                for i, (_, raw) in enumerate(parsed)
                if (raw.get("parentSpanId") or "") not in otel_ids
            ),
            0,
        )
        (root, a), _ = parsed[root_index]
        ordered = [span for (span, _), _ in parsed]
        traces.append(
            Trace(
                id=a.get("agenteval.trace.id", trace_id),
                session_id=a.get("gen_ai.conversation.id") or a.get("session.id"),
                input=_decoded(a["agenteval.trace.input"])
                if "agenteval.trace.input" in a
                else root.input,
                output=_decoded(a["agenteval.trace.output"])
                if "agenteval.trace.output" in a
                else root.output,
                error=a.get("agenteval.trace.error") or root.error,
                spans=ordered,
                tools=[
                    ToolSpec.model_validate(t)
                    for t in _decoded(a.get("agenteval.trace.tools", "[]"))
                ],
                metadata=_decoded(a.get("agenteval.trace.metadata", "{}")),
                framework=a.get("agenteval.trace.framework", "otel"),
                # our own exports say the trace's times; other sources take the root's
                start_time=a.get("agenteval.trace.start_time")
                if "agenteval.trace.id" in a
                else root.start_time,
                end_time=a.get("agenteval.trace.end_time")
                if "agenteval.trace.id" in a
                else root.end_time,
            )
        )
    return traces
