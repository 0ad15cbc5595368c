"""Every trace the framework tests capture also goes through an OpenTelemetry export and back,
and must come back equal: the round trip is checked on every kind of run the adapters
record (failed, stopped, interrupted, handed off, multi-agent, streamed, ...)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

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


def exported_and_imported(traces: list[Trace]) -> list[Trace]:
    """The traces through OTelExporter (SDK spans) → OTLP JSON text → import_otlp."""
    from agenteval_otel import OTelExporter, import_otlp, otlp_json
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    disabled = os.environ.pop("OTEL_SDK_DISABLED", None)  # conftest turns the SDK off
    try:
        memory = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        exporter = OTelExporter(provider, redactor=None)
        for trace in traces:
            exporter.export(trace)
    finally:
        if disabled is not None:
            os.environ["OTEL_SDK_DISABLED"] = disabled
    return import_otlp(json.dumps(otlp_json(memory.get_finished_spans())))


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
