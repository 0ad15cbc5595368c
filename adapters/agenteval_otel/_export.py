"""Traces → OpenTelemetry GenAI spans, scores → ``gen_ai.evaluation.result`` events."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Status, StatusCode

from agenteval_core import (
    DEFAULT_REDACTOR,
    OTEL_OPERATION_NAMES,
    MetricResult,
    Redactor,
    Sink,
    Span,
    SpanKind,
    Trace,
    TraceResults,
)

__all__ = ["OTelExporter", "OTelSink", "otlp_json"]

EVALUATION_EVENT = "gen_ai.evaluation.result"


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _seconds_to_ns(value: float | None) -> int | None:
    return None if value is None else round(value * 1e9)


def _span_attributes(span: Span, trace: Trace, root: bool) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": OTEL_OPERATION_NAMES[span.kind],
        "agenteval.span.id": span.id,
        "agenteval.span.kind": span.kind.value,
        "agenteval.span.name": span.name,
        "agenteval.input": _json(span.input),
        "agenteval.output": _json(span.output),
    }
    if span.parent_id:
        attributes["agenteval.span.parent_id"] = span.parent_id
    for key, value in span.attributes.items():
        if value is not None:
            attributes[key] = value if isinstance(value, str | bool | int | float) else _json(value)
    if span.thought:
        attributes["agenteval.thought"] = span.thought
    if span.requested_tool_calls:
        attributes["agenteval.requested_tool_calls"] = _json(
            [c.model_dump() for c in span.requested_tool_calls]
        )
    if span.kind is SpanKind.AGENT:
        attributes["gen_ai.agent.name"] = span.name
    if span.tool_call is not None:
        call = span.tool_call
        attributes["gen_ai.tool.name"] = call.name
        attributes["gen_ai.tool.call.arguments"] = _json(call.arguments)
        attributes["gen_ai.tool.call.result"] = _json(call.result)
        if call.id:
            attributes["gen_ai.tool.call.id"] = call.id
    if root:
        attributes["agenteval.trace.id"] = trace.id
        attributes["agenteval.trace.input"] = _json(trace.input)
        attributes["agenteval.trace.output"] = _json(trace.output)
        attributes["agenteval.trace.tools"] = _json([t.model_dump() for t in trace.tools])
        attributes["agenteval.trace.metadata"] = _json(trace.metadata)
        if trace.framework:
            attributes["agenteval.trace.framework"] = trace.framework
        if trace.session_id:
            attributes["gen_ai.conversation.id"] = trace.session_id
        if trace.error:
            attributes["agenteval.trace.error"] = trace.error
        for field in ("start_time", "end_time"):
            if getattr(trace, field) is not None:
                attributes[f"agenteval.trace.{field}"] = getattr(trace, field)
    return attributes


class OTelExporter:
    """Writes agenteval traces through the OpenTelemetry SDK, so any OTLP backend (Phoenix,
    Langfuse, Jaeger, ...) shows them: one span per agenteval span, named
    ``<gen_ai.operation.name> <name>`` (``invoke_agent``, ``chat``, ``execute_tool``), and one
    ``gen_ai.evaluation.result`` event per metric result on the root span."""

    def __init__(
        self, tracer_provider: Any = None, *, redactor: Redactor | None = DEFAULT_REDACTOR
    ) -> None:
        provider = tracer_provider or otel_trace.get_tracer_provider()
        self.tracer = provider.get_tracer("agenteval")
        self.redactor = redactor

    def export(self, trace: Trace, results: Sequence[MetricResult] = ()) -> None:
        """Write one trace (redacted first, unless ``redactor=None``) and its results."""
        if self.redactor is not None:
            trace = self.redactor.trace(trace)
        opened: dict[str, Any] = {}
        root_id = trace.spans[0].id if trace.spans else None
        for span in trace.spans:
            parent = opened.get(span.parent_id or "")
            context = otel_trace.set_span_in_context(parent) if parent is not None else None
            otel_span = self.tracer.start_span(
                f"{OTEL_OPERATION_NAMES[span.kind]} {span.name}",
                context=context,
                start_time=_seconds_to_ns(span.start_time),
                attributes=_span_attributes(span, trace, root=span.id == root_id),
            )
            if span.error:
                otel_span.set_attribute("agenteval.error", span.error)
                otel_span.set_status(Status(StatusCode.ERROR, span.error))
            opened[span.id] = otel_span
        root = opened.get(root_id or "")
        for result in results:
            if root is None:
                break
            event = {
                "gen_ai.evaluation.name": result.name,
                "gen_ai.evaluation.explanation": result.reason,
                "agenteval.metric.version": result.version,
                "agenteval.threshold": result.threshold,
            }
            if result.score is not None:
                event["gen_ai.evaluation.score.value"] = result.score
                event["gen_ai.evaluation.score.label"] = "pass" if result.success else "fail"
            if result.error:
                event["error.type"] = result.error
            root.add_event(EVALUATION_EVENT, event)
        for span in reversed(trace.spans):  # children end before their parents
            opened[span.id].end(end_time=_seconds_to_ns(span.end_time))


class OTelSink(Sink):
    """The OpenTelemetry sink: exports each scored trace with its results through an
    :class:`OTelExporter`, online (``OnlineEvaluator(sinks=[OTelSink()])``) or in replay
    (``replay(..., sinks=[OTelSink()])``)."""

    def __init__(self, exporter: OTelExporter | None = None) -> None:
        self.exporter = exporter if exporter is not None else OTelExporter()

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        self.exporter.export(trace, results.results)


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
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
