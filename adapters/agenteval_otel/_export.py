"""Traces → OpenTelemetry spans, scores → ``gen_ai.evaluation.result`` log events parented to
the span they evaluate (and, for Phoenix, span annotations), sent to any OTLP endpoint with
failures reported. Span and trace ids derive from agenteval's own, so an export repeated
lands on the same ids."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import httpx
from opentelemetry import _logs as otel_logs
from opentelemetry import trace as otel_trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind as OTelSpanKind
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

from ._conventions import (
    SPANLESS,
    error_type,
    otel_ids,
    per_call_results,
    span_attributes,
    span_name,
    to_ns,
    within_length,
    within_limit,
)
from ._phoenix import PhoenixAnnotations

__all__ = ["ExportError", "ExportedTrace", "OTelExporter", "OTelSink"]

logger = logging.getLogger("agenteval.otel")

EVALUATION_EVENT = "gen_ai.evaluation.result"

ScoreEvents = Literal["logs", "spans", "none"]


class ExportError(RuntimeError):
    """Spans or annotations could not be delivered; the message says where and why."""


@dataclass
class ExportedTrace:
    """Where one trace went: its OpenTelemetry trace id and each agenteval span's
    OpenTelemetry span id (both lowercase hex), for finding it again in a backend."""

    trace_id: str
    span_ids: dict[str, str] = field(default_factory=dict)


class _Reporting:
    """Wraps an OTLP exporter (spans or log records) so a failed batch is counted and said
    once, with the endpoint, instead of being dropped with a line on stderr."""

    def __init__(self, inner: Any, endpoint: str, what: str, success: Any, failure: Any) -> None:
        self.inner, self.endpoint, self.what = inner, endpoint, what  # what: "span(s)", ...
        self._success, self._failure = success, failure
        self.failed = 0
        self.log_failures = True
        self._lock = threading.Lock()

    def export(self, batch: Sequence[Any]) -> Any:
        try:
            result = self.inner.export(batch)
        except Exception as exc:  # an exporter must never raise into the SDK's worker
            logger.debug("agenteval: exporting %s to %s raised %r", self.what, self.endpoint, exc)
            result = self._failure
        with self._lock:
            if result != self._success:
                if not self.failed and self.log_failures:
                    logger.error(
                        "agenteval: could not export %s to %s; is the collector (or Phoenix) "
                        "running there?",
                        self.what,
                        self.endpoint,
                    )
                self.failed += len(batch)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


class _DerivedIds(IdGenerator):
    """Gives the span being started the ids :func:`otel_ids` derived for it (set on this
    thread just before ``start_span``); anything else the tracer starts gets random ids."""

    def __init__(self, fallback: IdGenerator) -> None:
        self.fallback = fallback
        self._next = threading.local()

    def use(self, trace_id: int, span_id: int) -> None:
        self._next.ids = (trace_id, span_id)

    def generate_trace_id(self) -> int:  # called for a root span only, before its span id
        ids = getattr(self._next, "ids", None)
        return ids[0] if ids else self.fallback.generate_trace_id()

    def generate_span_id(self) -> int:
        ids = self._next.__dict__.pop("ids", None)
        return ids[1] if ids else self.fallback.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return False


def _within(seconds: float, work: Callable[[], object]) -> bool:
    """Run ``work`` on a daemon thread and wait at most ``seconds``: the SDK's flush and
    shutdown block on the network with timeouts of their own, longer than a caller's
    deadline. False: still running when the time was up (it finishes in the background)."""
    done = threading.Event()

    def run() -> None:
        try:
            work()
        except Exception as exc:
            logger.debug("agenteval: OpenTelemetry flush or shutdown raised %r", exc)
        finally:
            done.set()

    threading.Thread(target=run, name="agenteval-otel-close", daemon=True).start()
    return done.wait(max(0.0, seconds))


def _logs_url(traces_url: str) -> str:
    """OTLP/HTTP puts logs beside traces: ``.../v1/traces`` → ``.../v1/logs``."""
    base = traces_url.rstrip("/")
    if not base.endswith("/v1/traces"):
        raise ValueError(
            f"OTelExporter: {traces_url} does not end in /v1/traces, so where log records go "
            "cannot be told: pass logs_endpoint=..., or score_events='spans' to carry scores "
            "as span events"
        )
    return base[: -len("traces")] + "logs"


def _probe(url: str, headers: dict[str, str] | None, timeout: float) -> int | str:
    """POST an empty OTLP request (valid protobuf: no spans, no records) to ``url``: its
    HTTP status, or why nothing answered."""
    try:
        response = httpx.post(
            url,
            content=b"",
            headers={"Content-Type": "application/x-protobuf", **(headers or {})},
            timeout=timeout,
        )
    except httpx.TimeoutException:
        return f"no answer within {timeout:g} s"
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        return "connection refused" if "refused" in reason.lower() else reason
    return response.status_code


def _positive(limit: object) -> int | None:
    return limit if isinstance(limit, int) and limit > 0 else None


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
        timeout: seconds for one request to the endpoint.
        score_events: how scores travel as ``gen_ai.evaluation.result`` events: ``"logs"``
            (log records parented to the evaluated span, as the GenAI conventions define
            them), ``"spans"`` (span events, for backends that show those and take no logs,
            such as Jaeger) or ``"none"``. Default: ``"none"`` with ``phoenix`` (Phoenix takes
            scores as annotations and has no logs endpoint), ``"logs"`` with ``endpoint`` or
            ``logger_provider``, else ``"spans"``.
        logs_endpoint: the OTLP/HTTP logs endpoint; default: ``endpoint``'s sibling
            (``.../v1/logs``).
        logger_provider: an SDK ``LoggerProvider`` for the log events when you pass
            ``tracer_provider``.
        log_failures: log the first failed delivery when it happens (the command line
            turns this off and reports once, at the end).
        close_timeout: the most :meth:`shutdown` waits for everything to be delivered.

    Spans are named and attributed after the GenAI conventions (``invoke_workflow``,
    ``invoke_agent {agent}``, ``chat {model}`` with kind CLIENT, ``execute_tool {tool}``) and
    OpenInference. Their ids derive from agenteval's (:func:`otel_ids`), so exporting a
    trace again gives the same ids (with an SDK ``TracerProvider``). Each trace metric's
    result evaluates the root span; metrics that score each tool call also evaluate each
    call's span. Failed exports are counted in :attr:`failed`, logged, and raised by
    :meth:`flush`.
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
        score_events: ScoreEvents | None = None,
        logs_endpoint: str | None = None,
        logger_provider: Any = None,
        log_failures: bool = True,
        close_timeout: float = 10.0,
    ) -> None:
        if tracer_provider is not None and endpoint is not None:
            raise ValueError(
                "OTelExporter: pass either tracer_provider or endpoint, not both "
                "(add your own exporter to your provider instead)"
            )
        if score_events not in (None, "logs", "spans", "none"):
            raise ValueError(
                f"OTelExporter: score_events={score_events!r}; use 'logs', 'spans' or 'none'"
            )
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            raise ValueError(
                "OTelExporter: OTEL_SDK_DISABLED=true turns the OpenTelemetry SDK off, so "
                "nothing would be exported; unset it to export"
            )
        if score_events is None and phoenix is not None:
            score_events = "none"  # Phoenix takes annotations and has no logs endpoint
        elif score_events is None:
            has_logs = endpoint or logs_endpoint or logger_provider
            score_events = "logs" if has_logs else "spans"
        self.score_events: ScoreEvents = score_events
        self.headers = headers
        self.close_timeout = close_timeout
        self._reporting: list[_Reporting] = []
        self._owned: list[Any] = []  # providers this exporter built, shut down with it
        if isinstance(phoenix, str) and endpoint is None and tracer_provider is None:
            endpoint = phoenix.rstrip("/") + "/v1/traces"
        resource = Resource.create(
            {"service.name": "agenteval"}
            | ({"openinference.project.name": project} if project else {})
        )
        if endpoint is not None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            tracer_provider = TracerProvider(resource=resource)
            spans = _Reporting(
                OTLPSpanExporter(endpoint=endpoint, headers=headers, timeout=timeout),
                endpoint,
                "span(s)",
                SpanExportResult.SUCCESS,
                SpanExportResult.FAILURE,
            )
            tracer_provider.add_span_processor(BatchSpanProcessor(cast(SpanExporter, spans)))
            self._reporting.append(spans)
            self._owned.append(tracer_provider)
        self.logs_endpoint: str | None = None
        if score_events == "logs" and logger_provider is None:
            if endpoint is None and logs_endpoint is None:
                logger_provider = otel_logs.get_logger_provider()
            else:
                from opentelemetry.exporter.otlp.proto.http._log_exporter import (
                    OTLPLogExporter,
                )

                self.logs_endpoint = logs_endpoint or _logs_url(str(endpoint))
                logger_provider = LoggerProvider(resource=resource)
                records = _Reporting(
                    OTLPLogExporter(endpoint=self.logs_endpoint, headers=headers, timeout=timeout),
                    self.logs_endpoint,
                    "log record(s)",
                    LogRecordExportResult.SUCCESS,
                    LogRecordExportResult.FAILURE,
                )
                logger_provider.add_log_record_processor(
                    BatchLogRecordProcessor(cast(LogRecordExporter, records))
                )
                self._reporting.append(records)
                self._owned.append(logger_provider)
        self.endpoint = endpoint
        self._logger_provider = logger_provider
        self.provider: Any = tracer_provider or otel_trace.get_tracer_provider()
        tracer: Any = self.provider.get_tracer("agenteval")
        self.tracer = tracer
        # how many attributes the SDK keeps on a span, and how long a value (no public
        # accessor: its tracer's span limits); another API's tracer keeps what it keeps
        limits = getattr(tracer, "_span_limits", None)
        self._attribute_limit = _positive(getattr(limits, "max_span_attributes", None))
        self._length_limit = _positive(getattr(limits, "max_span_attribute_length", None))
        # an event's attributes (the exception, the scores) are held to the general one
        self._event_length_limit = _positive(getattr(limits, "max_attribute_length", None))
        self.logger: Any = (
            logger_provider.get_logger("agenteval") if logger_provider is not None else None
        )
        # the SDK's tracer asks its id generator for each new span's ids: ours answers with
        # the ids derived for the span being exported (other tracers keep theirs)
        ids = getattr(tracer, "id_generator", None)
        if isinstance(ids, IdGenerator) and not isinstance(ids, _DerivedIds):
            tracer.id_generator = ids = _DerivedIds(ids)
        self._ids: _DerivedIds | None = ids if isinstance(ids, _DerivedIds) else None
        self.redactor = redactor
        if isinstance(phoenix, str):
            phoenix = PhoenixAnnotations(phoenix, headers=headers)
        self.phoenix = phoenix
        self.log_failures = log_failures
        """Whether the first failed delivery is logged as it happens."""
        for reporting in self._reporting:
            reporting.log_failures = log_failures
        if phoenix is not None:
            phoenix.log_failures = log_failures
        self.traces = 0
        self._shut = False
        self._preflighted = False

    @property
    def failed(self) -> int:
        """Spans and log records that could not be delivered to ``endpoint`` (0 when no
        endpoint was given: your own provider's exporters report for themselves)."""
        return sum(reporting.failed for reporting in self._reporting)

    def preflight(self, timeout: float = 5.0) -> str | None:
        """Check, before anything is scored, that the endpoint takes OTLP: one empty export
        request (no spans) to it, and one to the logs endpoint. Raises :class:`ExportError`
        in one line when the endpoint cannot be reached or refuses; a logs endpoint that
        does not exist (404, 405: Jaeger, Langfuse) switches the scores to span events, and
        the returned note says so. Nothing to check (your own provider, or checked
        already): None."""
        if self.endpoint is None or self._preflighted:
            return None
        self._preflighted = True  # the command line checks first, then replay: said once
        answer = _probe(self.endpoint, self.headers, timeout)
        if isinstance(answer, str):
            raise ExportError(f"no OTLP endpoint answers at {self.endpoint} ({answer})")
        if not 200 <= answer < 300:
            hints = {401: "check the API key", 403: "check the API key", 404: "check the path"}
            advice = hints.get(answer, "is it an OTLP/HTTP traces endpoint?")
            raise ExportError(f"{self.endpoint} refused an OTLP export: HTTP {answer} ({advice})")
        if self.score_events != "logs" or self.logs_endpoint is None:
            return None
        answer = _probe(self.logs_endpoint, self.headers, timeout)
        if isinstance(answer, int) and 200 <= answer < 300:
            return None
        what = f"HTTP {answer}" if isinstance(answer, int) else answer
        self.score_events = "spans"
        return (
            f"{self.logs_endpoint} takes no logs ({what}): scores go as span events on the "
            "spans they evaluate instead"
        )

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
        results as they stand after it (marked ``agenteval.evaluation.scope=session``)."""
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
            attributes = within_limit(attributes, self._attribute_limit)
            attributes = within_length(attributes, self._length_limit)
            if self._ids is not None:
                self._ids.use(*otel_ids(trace.id, span.id))
            otel_span = self.tracer.start_span(
                span_name(trace, index),
                context=context,
                # a model call goes out of the process; the rest runs in it
                kind=OTelSpanKind.CLIENT if span.kind is SpanKind.LLM else OTelSpanKind.INTERNAL,
                start_time=to_ns(span.start_time),
                attributes=attributes,
            )
            if span.error is not None:
                otel_span.set_status(Status(StatusCode.ERROR, span.error))
                raised = {"exception.type": error_type(span.error), "exception.message": span.error}
                otel_span.add_event(
                    "exception",
                    within_length(raised, self._event_length_limit),
                    timestamp=to_ns(span.end_time),
                )
            elif span.end_time is not None:
                otel_span.set_status(Status(StatusCode.OK))  # it ended, and without an error
            opened[span.id] = otel_span
        exported = ExportedTrace(trace_id=f"{opened[root_id].get_span_context().trace_id:032x}")
        for span_id, otel_span in opened.items():
            exported.span_ids[span_id] = f"{otel_span.get_span_context().span_id:016x}"
        root = trace.spans[0]
        tool_spans = [s for s in trace.spans if s.tool_call is not None]
        evaluations: list[tuple[Span, dict[str, Any]]] = []
        for result in results:
            evaluations.append((root, self._event(result)))
            for index, call in per_call_results(result):
                if index < len(tool_spans):
                    evaluations.append((tool_spans[index], self._event(call, scope="tool_call")))
        evaluations.extend(
            (root, self._event(result, scope="session")) for result in session_results
        )
        if self.score_events == "spans":
            for span, event in evaluations:  # inside the span: at its end, not after it
                opened[span.id].add_event(EVALUATION_EVENT, event, timestamp=to_ns(span.end_time))
        for span in reversed(trace.spans):  # children end before their parents
            opened[span.id].end(end_time=to_ns(span.end_time))
        if self.score_events == "logs" and self.logger is not None:
            for span, event in evaluations:
                self.logger.emit(
                    event_name=EVALUATION_EVENT,
                    context=otel_trace.set_span_in_context(opened[span.id]),
                    attributes=event,
                )
        self.traces += 1
        if self.phoenix is not None:
            self.phoenix.add_trace(trace, exported, results)
        return exported

    def _event(self, result: MetricResult, scope: str | None = None) -> dict[str, Any]:
        return within_length(_event(result, scope), self._event_length_limit)

    def export_session(self, session_id: str, results: Sequence[MetricResult]) -> None:
        """A closed session's final results: Phoenix session annotations (plain OTLP has no
        session record; each trace's events already carry the session's running scores)."""
        if self.phoenix is not None:
            self.phoenix.add_session(session_id, results)

    def flush(self, timeout: float = 30.0) -> None:
        """Deliver everything exported so far, waiting at most ``timeout`` seconds; raises
        :class:`ExportError` if spans, log records or annotations could not be delivered
        (how many, where)."""
        deadline = time.monotonic() + timeout
        problems = self._flush_providers(deadline)
        if self.phoenix is not None:
            problems.extend(self.phoenix.flush(max(0.0, deadline - time.monotonic())))
        if problems:
            raise ExportError("; ".join(problems))

    def _flush_providers(self, deadline: float) -> list[str]:
        """Flush each provider within the deadline; then what could not be delivered."""
        providers = self._owned or [self.provider, self._logger_provider]
        problems = []
        for provider in providers:
            if not hasattr(provider, "force_flush"):
                continue
            left = max(0.0, deadline - time.monotonic())

            def run(provider: Any = provider, ms: int = int(left * 1000)) -> None:
                provider.force_flush(ms)

            if not _within(left, run):
                problems.append(f"still sending after {left:.3g} s")
                break
        for reporting in self._reporting:
            if reporting.failed:
                problems.append(
                    f"{reporting.failed} {reporting.what} not accepted by {reporting.endpoint}"
                )
        return problems

    def shutdown(self, timeout: float | None = None) -> None:
        """Flush and release the providers this exporter built (a provider you passed in is
        yours to shut down), all within ``timeout`` seconds (default: ``close_timeout``):
        what is not delivered by then is reported, not waited for. Raises
        :class:`ExportError` like :meth:`flush`. Safe to call twice."""
        if self._shut:
            return
        self._shut = True
        deadline = time.monotonic() + (self.close_timeout if timeout is None else timeout)
        try:
            self.flush(max(0.0, deadline - time.monotonic()))
        finally:
            if self.phoenix is not None:
                self.phoenix.close(max(0.0, deadline - time.monotonic()))
            for provider in self._owned:
                _within(max(0.0, deadline - time.monotonic()), provider.shutdown)


class OTelSink(Sink):
    """The OpenTelemetry sink: exports each scored trace with its results, online
    (``OnlineEvaluator(sinks=[OTelSink(...)])``) or in replay
    (``replay(..., sinks=[OTelSink(...)])``). Arguments are :class:`OTelExporter`'s, or
    ``exporter=`` one you built. Replay runs the exporter's :meth:`~OTelExporter.preflight`
    before scoring. Closing the sink flushes within the exporter's ``close_timeout`` (or
    the evaluator's close deadline); a failure to deliver is logged, counted in
    :attr:`errors` and described in :attr:`problem`."""

    def __init__(self, exporter: OTelExporter | None = None, **options: Any) -> None:
        if exporter is not None and options:
            raise ValueError("OTelSink: pass an exporter or its options, not both")
        self.exporter = exporter if exporter is not None else OTelExporter(**options)
        self.problem: str | None = None
        """What could not be delivered, once the sink is closed (None: everything was)."""
        self._upstream: Redactor | None = None

    def preflight(self) -> str | None:
        """The exporter's preflight check (:meth:`OTelExporter.preflight`)."""
        return self.exporter.preflight()

    def redacted_by(self, redactor: Redactor | None) -> None:
        self._upstream = redactor

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        if results.repeat:  # a capture line read twice: the trace went out the first time
            return
        # an online evaluator's traces come redacted: by this exporter's redactor (the
        # default for both), once is enough
        once = self._upstream is not None and self._upstream is self.exporter.redactor
        self.exporter.export(trace, results.results, results.session_results, redacted=once)

    def session_scored(self, session_id: str, results: list[MetricResult]) -> None:
        self.exporter.export_session(session_id, results)

    def close(self, timeout: float | None = None) -> None:
        try:
            self.exporter.shutdown(timeout)
        except ExportError as exc:
            self.errors += 1
            self.problem = str(exc)
            if self.exporter.log_failures:
                logger.error("agenteval: OpenTelemetry export incomplete: %s", exc)
