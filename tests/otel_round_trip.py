"""Every trace the framework tests capture also goes through an OpenTelemetry export and back,
and must come back equal: the round trip is checked on every kind of run the adapters
record (failed, stopped, interrupted, handed off, multi-agent, streamed, ...)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agenteval_core import Trace, read_capture

ADAPTER_MODULES = (
    "test_langchain_adapter",
    "test_langchain_fidelity",
    "test_llamaindex_adapter",
    "test_llamaindex_fidelity",
    "test_crewai_adapter",
    "test_crewai_fidelity",
    "test_guard_parity",
    "test_sessions",
)


LENGTH_LIMIT = 200
"""The attribute value length limit the second round trip runs under (a provider's
``SpanLimits(max_attribute_length=...)``, ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``): short
enough that every kind of run has values past it."""


def exported_and_imported(traces: list[Trace], length_limit: int | None = None) -> list[Trace]:
    """The traces through OTelExporter (SDK spans, attribute values held to
    ``length_limit`` characters when given) → OTLP JSON text → import_otlp."""
    from agenteval_otel import OTelExporter, import_otlp, otlp_json
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    disabled = os.environ.pop("OTEL_SDK_DISABLED", None)  # conftest turns the SDK off
    try:
        memory = InMemorySpanExporter()
        provider = TracerProvider(span_limits=SpanLimits(max_attribute_length=length_limit))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        exporter = OTelExporter(provider, redactor=None)
        for trace in traces:
            exporter.export(trace)
    finally:
        if disabled is not None:
            os.environ["OTEL_SDK_DISABLED"] = disabled
    spans = memory.get_finished_spans()
    if length_limit is None:
        assert_conventions(traces, spans)
    return import_otlp(json.dumps(otlp_json(spans)))


def assert_conventions(traces: list[Trace], spans: Sequence[Any]) -> None:
    """What a backend needs on every span of every real run: the run's input on its root,
    the conversation id on each span of a session, kind CLIENT on model calls, and the
    provider on each agent and workflow span whose model calls name one."""
    from opentelemetry.trace import SpanKind as OTelSpanKind

    for trace in traces:
        exported = [s for s in spans if s.context.trace_id == _trace_of(spans, trace.id)]
        root = next(s for s in exported if s.parent is None)
        if trace.input is not None:
            assert "input.value" in root.attributes, f"{trace.id}: root without input.value"
        for span in exported:
            a = span.attributes
            if trace.session_id:
                assert a["gen_ai.conversation.id"] == trace.session_id, span.name
            if a.get("openinference.span.kind") == "LLM":
                assert span.kind is OTelSpanKind.CLIENT, span.name
        providers = {s.attributes.get("gen_ai.provider.name") for s in exported}
        if any(s.attributes.get("llm.provider") for s in exported):
            agents = [
                s
                for s in exported
                if s.attributes.get("gen_ai.operation.name") in ("invoke_agent", "invoke_workflow")
            ]
            for agent in agents:
                below = _below(exported, agent)
                if any(b.attributes.get("llm.provider") for b in below):
                    assert agent.attributes.get("gen_ai.provider.name") in providers, agent.name
                    assert agent.attributes.get("gen_ai.provider.name"), agent.name


def _trace_of(spans: Sequence[Any], trace_id: str) -> int:
    return next(
        s.context.trace_id for s in spans if s.attributes.get("agenteval.trace.id") == trace_id
    )


def _below(spans: Sequence[Any], top: Any) -> list[Any]:
    children: dict[int, list[Any]] = {}
    for span in spans:
        if span.parent is not None:
            children.setdefault(span.parent.span_id, []).append(span)
    found, waiting = [], [top]
    while waiting:
        for child in children.get(waiting.pop().context.span_id, []):
            found.append(child)
            waiting.append(child)
    return found


def first_difference(want: object, got: object, at: str = "trace") -> str | None:
    """Where two dumped values first differ, as a path and the two values."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(want) | set(got), key=str):
            found = first_difference(want.get(key), got.get(key), f"{at}.{key}")
            if found:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for index, (w, g) in enumerate(zip(want, got, strict=True)):
            found = first_difference(w, g, f"{at}[{index}]")
            if found:
                return found
        return None
    return None if want == got else f"{at}: {want!r} became {got!r}"


def assert_round_trips(traces: list[Trace]) -> None:
    back = {trace.id: trace for trace in exported_and_imported(traces)}
    for trace in traces:
        assert trace.id in back, f"trace {trace.id} was lost in the OTel round trip"
        assert back[trace.id] == trace, first_difference(
            trace.model_dump(), back[trace.id].model_dump()
        )


MARKER = re.compile(r"…\[truncated: (\d+) characters in all\]\Z")
"""How every string agenteval cuts ends: the marker of its original size."""
UNREADABLE = "agenteval.otel.unreadable"
TRACE_FIELDS = {
    "agenteval.trace.tools": "tools",
    "agenteval.trace.alerts": "alerts",
    "metadata": "metadata",
}
"""The root span's attributes that hold a field of the trace, by the field."""


def cut_from(want: object, got: object, at: str = "trace") -> str | None:
    """Where ``got`` is not ``want`` whole or visibly cut, as a path and the two values:
    equal, or a text of ``want``'s start (of its JSON, when ``want`` is no text) ending in
    the marker of its original size, with dicts and lists of the same shape around."""
    if isinstance(want, dict) and isinstance(got, dict) and set(want) == set(got):
        found = (cut_from(want[key], got[key], f"{at}.{key}") for key in sorted(want, key=str))
        return next((problem for problem in found if problem), None)
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        found = (
            cut_from(w, g, f"{at}[{i}]") for i, (w, g) in enumerate(zip(want, got, strict=True))
        )
        return next((problem for problem in found if problem), None)
    if want == got:
        return None
    marker = MARKER.search(got) if isinstance(got, str) else None
    text = want if isinstance(want, str) else json.dumps(want, ensure_ascii=False, sort_keys=True)
    earlier = MARKER.search(text)
    size = int(earlier[1]) if earlier else len(text)
    if marker and text.startswith(got[: marker.start()]) and int(marker[1]) == size:
        return None
    return f"{at}: {want!r} became {got!r}"


def assert_cut_visibly(traces: list[Trace]) -> None:
    """Under an attribute value length limit, each trace comes back with every value whole
    or visibly cut; a record the file holds cut past reading is named on its span
    (``agenteval.otel.unreadable``) and comes back empty."""
    back = {trace.id: trace for trace in exported_and_imported(traces, LENGTH_LIMIT)}
    for trace in traces:
        assert trace.id in back, f"trace {trace.id} was lost under a length limit"
        want, got = trace.model_dump(), back[trace.id].model_dump()
        for index, (span, cut) in enumerate(zip(want["spans"], got["spans"], strict=True)):
            lost = cut["attributes"].pop(UNREADABLE, [])
            unknown = [TRACE_FIELDS[key] for key in lost if key in TRACE_FIELDS and index == 0]
            for field in unknown:
                assert not got[field], (trace.id, field, got[field])
                got[field] = want[field]
            if "agenteval.requested_tool_calls" in lost:
                cut["requested_tool_calls"] = span["requested_tool_calls"]
            if "gen_ai.tool.call.arguments" in lost:
                assert cut["tool_call"]["arguments"] == {}, cut["tool_call"]
                cut["tool_call"]["arguments"] = span["tool_call"]["arguments"]
        problem = cut_from(want, got)
        assert problem is None, problem


@pytest.fixture(autouse=True)
def otel_round_trip(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.module.__name__.rpartition(".")[2] not in ADAPTER_MODULES:
        yield
        return
    tmp_path: Path = request.getfixturevalue("tmp_path")
    yield
    # every trace line of every JSON Lines file the test wrote (results and labels lines
    # are not traces: read_capture reports them to on_error, which skips them)
    traces = [
        trace
        for path in sorted(tmp_path.rglob("*.jsonl"))
        for trace in read_capture(path, on_error=lambda error: None)
    ]
    if traces:
        assert_round_trips(traces)
        assert_cut_visibly(traces)
