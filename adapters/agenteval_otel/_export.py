"""Traces → OpenTelemetry spans, scores → ``gen_ai.evaluation.result`` events (and, for
Phoenix, span annotations), sent to any OTLP endpoint with failures reported."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode

from agenteval_core import (
    DEFAULT_REDACTOR,
    MetricResult,
    Redactor,
    Sink,
    Span,
    SpanKind,
    Trace,
    TraceResults,
)

from ._conventions import SPANLESS, error_type, per_call_results, span_attributes, span_name, to_ns
from ._phoenix import PhoenixAnnotations

__all__ = ["ExportError", "ExportedTrace", "OTelExporter", "OTelSink"]

logger = logging.getLogger("agenteval.otel")

EVALUATION_EVENT = "gen_ai.evaluation.result"


class ExportError(RuntimeError):
    """Spans or annotations could not be delivered; the message says where and why."""


@dataclass
class ExportedTrace:
    """Where one trace went: its OpenTelemetry trace id and each agenteval span's
    OpenTelemetry span id (both lowercase hex), for finding it again in a backend."""

    trace_id: str
    span_ids: dict[str, str] = field(default_factory=dict)


class _ReportingExporter(SpanExporter):
    """Wraps the OTLP exporter so a failed batch is counted and said once, with the
    endpoint and what to check, instead of being dropped with a line on stderr."""

    def __init__(self, inner: SpanExporter, endpoint: str) -> None:
        self.inner = inner
        self.endpoint = endpoint
        self.exported = 0
        self.failed = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter must never raise into the SDK's worker
            logger.error("agenteval: exporting spans to %s raised %r", self.endpoint, exc)
            result = SpanExportResult.FAILURE
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
            else:
                if not self.failed:
                    logger.error(
                        "agenteval: could not export spans to %s; is the collector (or "
                        "Phoenix) running there? Set the endpoint with OTelExporter(endpoint=...)",
                        self.endpoint,
                    )
                self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _event(result: MetricResult, scope: str | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {
        "gen_ai.evaluation.name": result.name,
        "gen_ai.evaluation.explanation": result.reason,
        "agenteval.metric.version": result.version,
        "agenteval.threshold": result.threshold,
        "agenteval.status": result.status,
    }
    if result.score is not None:
        event["gen_ai.evaluation.score.value"] = result.score
    if result.success is not None:
        event["gen_ai.evaluation.score.label"] = "pass" if result.success else "fail"
    if result.error:
        event["error.type"] = error_type(result.error)
        event["agenteval.error"] = result.error
    if result.judge_model:
        event["agenteval.judge.model"] = result.judge_model
    if scope:
        event["agenteval.evaluation.scope"] = scope
    return event


class OTelExporter:
    """Writes agenteval traces as OpenTelemetry spans any OTLP backend shows (Arize Phoenix,
    Langfuse, Jaeger, a collector).

    Args:
        tracer_provider: an SDK ``TracerProvider`` you configured; default: one built for
            ``endpoint``, or the global provider when neither is given.
        endpoint: an OTLP/HTTP traces endpoint, e.g. ``http://127.0.0.1:4318/v1/traces``
            (a collector) or ``http://127.0.0.1:6006/v1/traces`` (Phoenix).
        headers: HTTP headers for the endpoint (API keys).
        project: the Phoenix project the spans go to (``openinference.project.name``).
        phoenix: a Phoenix base URL (``http://127.0.0.1:6006``) or client; scores are also
            sent there as span, trace and session annotations.
        redactor: applied to each trace before export (``None``: export as is).

    Spans are named and attributed after the GenAI conventions (``invoke_workflow``,
    ``invoke_agent {agent}``, ``chat {model}``, ``execute_tool {tool}``) and OpenInference.
    Each metric result is a ``gen_ai.evaluation.result`` event on the root span; metrics
    that score each tool call also put one on each call's span. Failed exports are counted
    in :attr:`failed`, logged, and raised by :meth:`flush`.
    """

    def __init__(
        self,
        tracer_provider: Any = None,
        *,
        endpoint: str | None = None,
        headers: dict[str, str] | None = None,
        project: str | None = None,
        phoenix: str | PhoenixAnnotations | None = None,
        redactor: Redactor | None = DEFAULT_REDACTOR,
        timeout: float = 10.0,
    ) -> None:
        if tracer_provider is not None and endpoint is not None:
            raise ValueError(
                "OTelExporter: pass either tracer_provider or endpoint, not both "
                "(add your own exporter to your provider instead)"
            )
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            raise ValueError(
                "OTelExporter: OTEL_SDK_DISABLED=true turns the OpenTelemetry SDK off, so "
                "nothing would be exported; unset it to export"
            )
        self._reporting: _ReportingExporter | None = None
        self._owns_provider = False
        if isinstance(phoenix, str) and endpoint is None and tracer_provider is None:
            endpoint = phoenix.rstrip("/") + "/v1/traces"
        if endpoint is not None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            resource = {"service.name": "agenteval"}
            if project:
                resource["openinference.project.name"] = project
            tracer_provider = TracerProvider(resource=Resource.create(resource))
            self._reporting = _ReportingExporter(
                OTLPSpanExporter(endpoint=endpoint, headers=headers, timeout=timeout), endpoint
            )
            tracer_provider.add_span_processor(BatchSpanProcessor(self._reporting))
            self._owns_provider = True
        self.endpoint = endpoint
        self.provider: Any = tracer_provider or otel_trace.get_tracer_provider()
        self.tracer = self.provider.get_tracer("agenteval")
        self.redactor = redactor
        if isinstance(phoenix, str):
            phoenix = PhoenixAnnotations(phoenix, headers=headers)
        self.phoenix = phoenix
        self.traces = 0
        self._shut = False

    @property
    def failed(self) -> int:
        """Spans that could not be delivered to ``endpoint`` (0 when no endpoint was given:
        your own provider's exporters report for themselves)."""
        return self._reporting.failed if self._reporting is not None else 0

    def export(
        self,
        trace: Trace,
        results: Sequence[MetricResult] = (),
        session_results: Sequence[MetricResult] = (),
        *,
        redacted: bool = False,
    ) -> ExportedTrace:
        """Write one trace (redacted first, unless ``redactor=None`` or ``redacted``: it
        already went through this exporter's redactor) with its results, and the session's
        results as they stand after it (events marked ``agenteval.evaluation.scope=session``)."""
        if self.redactor is not None and not redacted:
            trace = self.redactor.trace(trace)
        spanless = not trace.spans
        if spanless:  # a trace built by hand: one span stands for the run, so it is seen
            stand_in = Span(
                id=f"{trace.id}-run",
                kind=SpanKind.AGENT,
                name="agent",
                input=trace.input,
                output=trace.output,
                error=trace.error,
                start_time=trace.start_time,
                end_time=trace.end_time,
            )
            trace = trace.model_copy(update={"spans": [stand_in]})
        opened: dict[str, Any] = {}
        root_id = trace.spans[0].id
        for index, span in enumerate(trace.spans):
            # a span whose parent is not (yet) exported stays in the run's trace, under its
            # root; agenteval.span.parent_id keeps the real parent
            parent = opened.get(span.parent_id or "") or (opened[root_id] if index else None)
            context = otel_trace.set_span_in_context(parent) if parent is not None else None
            attributes = span_attributes(span, trace, index)
            if spanless:
                attributes[SPANLESS] = True
            otel_span = self.tracer.start_span(
                span_name(trace, index),
                context=context,
                start_time=to_ns(span.start_time),
                attributes=attributes,
            )
            if span.error is not None:
                otel_span.set_status(Status(StatusCode.ERROR, span.error))
                otel_span.add_event(
                    "exception",
                    {"exception.type": error_type(span.error), "exception.message": span.error},
                    timestamp=to_ns(span.end_time),
                )
            elif span.end_time is not None:
                otel_span.set_status(Status(StatusCode.OK))  # it ended, and without an error
            opened[span.id] = otel_span
        exported = ExportedTrace(trace_id=f"{opened[root_id].get_span_context().trace_id:032x}")
        for span_id, otel_span in opened.items():
            exported.span_ids[span_id] = f"{otel_span.get_span_context().span_id:016x}"
        root_span = opened[root_id]
        tool_spans = [opened[s.id] for s in trace.spans if s.tool_call is not None]
        for result in results:
            root_span.add_event(EVALUATION_EVENT, _event(result))
            for index, call in per_call_results(result):
                if index < len(tool_spans):
                    tool_spans[index].add_event(
                        EVALUATION_EVENT,
                        {
                            "gen_ai.evaluation.name": call.name,
                            "gen_ai.evaluation.score.value": call.score,
                            "gen_ai.evaluation.score.label": "pass" if call.success else "fail",
                            "gen_ai.evaluation.explanation": call.reason,
                            "agenteval.evaluation.scope": "tool_call",
                        },
                    )
        for result in session_results:
            root_span.add_event(EVALUATION_EVENT, _event(result, scope="session"))
        for span in reversed(trace.spans):  # children end before their parents
            opened[span.id].end(end_time=to_ns(span.end_time))
        self.traces += 1
        if self.phoenix is not None:
            self.phoenix.add_trace(trace, exported, results)
        return exported

    def export_session(self, session_id: str, results: Sequence[MetricResult]) -> None:
        """A closed session's final results: Phoenix session annotations (plain OTLP has no
        session record; each trace's events already carry the session's running scores)."""
        if self.phoenix is not None:
            self.phoenix.add_session(session_id, results)

    def flush(self, timeout: float = 30.0) -> None:
        """Deliver everything exported so far; raises :class:`ExportError` if spans or
        annotations could not be delivered (how many, where)."""
        flushed = True
        if hasattr(self.provider, "force_flush"):
            flushed = self.provider.force_flush(int(timeout * 1000))
        problems = []
        if not flushed:
            problems.append(f"spans still queued after {timeout:g} s")
        if self.failed:
            problems.append(f"{self.failed} span(s) not accepted by {self.endpoint}")
        if self.phoenix is not None:
            problems.extend(self.phoenix.flush(timeout))
        if problems:
            raise ExportError("; ".join(problems))

    def shutdown(self) -> None:
        """Flush and release the provider this exporter built (a provider you passed in is
        yours to shut down); raises :class:`ExportError` like :meth:`flush`. Safe to call
        twice."""
        if self._shut:
            return
        self._shut = True
        try:
            self.flush()
        finally:
            if self.phoenix is not None:
                self.phoenix.close()
            if self._owns_provider:
                self.provider.shutdown()


class OTelSink(Sink):
    """The OpenTelemetry sink: exports each scored trace with its results, online
    (``OnlineEvaluator(sinks=[OTelSink(...)])``) or in replay
    (``replay(..., sinks=[OTelSink(...)])``). Arguments are :class:`OTelExporter`'s, or
    ``exporter=`` one you built. Closing the sink flushes; a failure to deliver is logged,
    counted in :attr:`errors` and described in :attr:`problem`."""

    def __init__(self, exporter: OTelExporter | None = None, **options: Any) -> None:
        if exporter is not None and options:
            raise ValueError("OTelSink: pass an exporter or its options, not both")
        self.exporter = exporter if exporter is not None else OTelExporter(**options)
        self.problem: str | None = None
        """What could not be delivered, once the sink is closed (None: everything was)."""
        self._upstream: Redactor | None = None

    def redacted_by(self, redactor: Redactor | None) -> None:
        self._upstream = redactor

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        # an online evaluator's traces come redacted: by this exporter's redactor (the
        # default for both), once is enough
        once = self._upstream is not None and self._upstream is self.exporter.redactor
        self.exporter.export(trace, results.results, results.session_results, redacted=once)

    def session_scored(self, session_id: str, results: list[MetricResult]) -> None:
        self.exporter.export_session(session_id, results)

    def close(self) -> None:
        try:
            self.exporter.shutdown()
        except ExportError as exc:
            self.errors += 1
            self.problem = str(exc)
            logger.error("agenteval: OpenTelemetry export incomplete: %s", exc)
