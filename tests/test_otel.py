"""OpenTelemetry: our spans exported through the SDK and re-imported give the same trace; an
OpenInference-style OTLP JSON sample (written by hand from its conventions) imports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agenteval_otel import OTelExporter, import_otlp_json, otlp_json
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agenteval_core import AgentStep, SpanKind, ToolCall, ToolSpec, Trace
from agenteval_core.metrics import ToolCallAccuracy


@pytest.fixture(autouse=True)
def sdk_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    # conftest disables the SDK for CrewAI's own telemetry; these tests need a working one
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)


def sample_trace() -> Trace:
    trace = Trace.from_steps(
        "Where is order A-1?",
        [
            AgentStep(
                thought="Look it up.",
                tool_calls=[
                    ToolCall(
                        id="c1",
                        name="lookup",
                        arguments={"order_id": "A-1"},
                        result={"status": "shipped"},
                    )
                ],
            ),
            AgentStep(
                tool_calls=[
                    ToolCall(id="c2", name="refund", arguments={"order_id": "A-1"}, error="denied")
                ]
            ),
            AgentStep(output="It shipped; the refund was denied."),
        ],
        tools=[ToolSpec(name="lookup", description="Find an order", parameters={"type": "object"})],
        session_id="s-1",
        framework="langchain",
        metadata={"user": "u-7"},
    )
    for index, span in enumerate(trace.spans):  # times exact in nanoseconds
        span.start_time, span.end_time = 1000.0 + index * 0.25, 1000.0 + index * 0.25 + 0.125
    trace.spans[0].end_time = 1010.0
    trace.spans[1].attributes = {"gen_ai.request.model": "m-1", "gen_ai.usage.input_tokens": 12}
    trace.spans[3].error = "denied"
    return trace


def exported(trace: Trace, results: list = ()) -> tuple[list, InMemorySpanExporter]:  # type: ignore[assignment]
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    OTelExporter(provider).export(trace, results)
    return list(memory.get_finished_spans()), memory


def test_round_trip_gives_the_same_trace(tmp_path: Path) -> None:
    trace = sample_trace()
    spans, _ = exported(trace)
    names = sorted(s.name for s in spans)
    assert (
        "invoke_agent agent" in names
        and "execute_tool lookup" in names
        and "chat agent_step" in names
    )
    path = tmp_path / "otlp.json"
    path.write_text(json.dumps(otlp_json(spans)))
    [back] = import_otlp_json(path)
    assert back == trace


def test_scores_become_evaluation_events() -> None:
    trace = sample_trace()
    result = ToolCallAccuracy().measure(trace.model_copy())
    spans, _ = exported(trace, [result])
    root = next(s for s in spans if s.parent is None)
    [event] = root.events
    assert event.name == "gen_ai.evaluation.result"
    assert event.attributes["gen_ai.evaluation.name"] == "tool_call_accuracy"
    tool = next(s for s in spans if s.name == "execute_tool lookup")
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"order_id": "A-1"}
    assert root.attributes["gen_ai.conversation.id"] == "s-1"


def attr(key: str, value: object) -> dict:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def test_openinference_sample_imports() -> None:
    # An agent span with an LLM call that asked for a tool, and the tool span, as
    # OpenInference's instrumentors write them (openinference.span.kind, input.value, ...).
    document = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "0af7651916cd43dd8448eb211c80319c",
                                "spanId": "b7ad6b7169203331",
                                "parentSpanId": "",
                                "name": "Agent",
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000003000000000",
                                "attributes": [
                                    attr("openinference.span.kind", "AGENT"),
                                    attr("input.value", "Weather in Paris?"),
                                    attr("output.value", "Sunny, 21°C."),
                                    attr("session.id", "conv-9"),
                                ],
                                "status": {"code": 1},
                            },
                            {
                                "traceId": "0af7651916cd43dd8448eb211c80319c",
                                "spanId": "00f067aa0ba902b7",
                                "parentSpanId": "b7ad6b7169203331",
                                "name": "ChatOpenAI",
                                "startTimeUnixNano": "1700000000500000000",
                                "endTimeUnixNano": "1700000001000000000",
                                "attributes": [
                                    attr("openinference.span.kind", "LLM"),
                                    attr("llm.model_name", "gpt-4o-mini"),
                                    attr("llm.token_count.prompt", 50),
                                    attr("llm.token_count.completion", 9),
                                    attr(
                                        "llm.output_messages.0.message.tool_calls.0.tool_call.id",
                                        "call_1",
                                    ),
                                    attr(
                                        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
                                        "get_weather",
                                    ),
                                    attr(
                                        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments",
                                        '{"city": "Paris"}',
                                    ),
                                ],
                            },
                            {
                                "traceId": "0af7651916cd43dd8448eb211c80319c",
                                "spanId": "1a2b3c4d5e6f7081",
                                "parentSpanId": "b7ad6b7169203331",
                                "name": "get_weather",
                                "startTimeUnixNano": "1700000001500000000",
                                "endTimeUnixNano": "1700000002000000000",
                                "attributes": [
                                    attr("openinference.span.kind", "TOOL"),
                                    attr("tool.name", "get_weather"),
                                    attr("input.value", '{"city": "Paris"}'),
                                    attr("output.value", "sunny, 21°C"),
                                ],
                            },
                        ]
                    }
                ]
            }
        ]
    }
    [trace] = import_otlp_json(document)
    assert (trace.input, trace.output, trace.session_id) == (
        "Weather in Paris?",
        "Sunny, 21°C.",
        "conv-9",
    )
    assert [s.kind for s in trace.spans] == [SpanKind.AGENT, SpanKind.LLM, SpanKind.TOOL]
    assert all(s.parent_id == trace.spans[0].id for s in trace.spans[1:])
    llm = trace.spans[1]
    assert llm.attributes["gen_ai.request.model"] == "gpt-4o-mini"
    assert [(c.id, c.name, c.arguments) for c in llm.requested_tool_calls] == [
        ("call_1", "get_weather", {"city": "Paris"})
    ]
    assert trace.token_usage() == {"input_tokens": 50, "output_tokens": 9}
    assert trace.tool_calls() == [
        ToolCall(name="get_weather", arguments={"city": "Paris"}, result="sunny, 21°C")
    ]
