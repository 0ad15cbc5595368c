"""OpenTelemetry: the export speaks the GenAI conventions and OpenInference, carries scores as
evaluation events, reaches a real OTLP/HTTP endpoint (and says so when it cannot), and
re-imports to the same trace from every file shape tools write."""

from __future__ import annotations

import base64
import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from agenteval_otel import (
    ExportError,
    OTelExporter,
    OTelSink,
    PhoenixAnnotations,
    _otlp,
    import_otlp,
    import_otlp_json,
    iter_otlp,
    otel_ids,
    otlp_json,
)
from click.testing import CliRunner
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind as OTelSpanKind
from otlp_receiver import OTLPReceiver

from agenteval_core import (
    REASONING,
    AgentStep,
    CaptureError,
    CaptureWriter,
    LoopAlert,
    MetricResult,
    OnlineEvaluator,
    RunStatus,
    Span,
    SpanKind,
    ToolCall,
    ToolSpec,
    Trace,
    read_capture,
    replay,
)
from agenteval_core.cli import cli
from agenteval_core.metrics import ParameterCorrectness, ToolCallAccuracy


@pytest.fixture(autouse=True)
def sdk_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    # conftest disables the SDK for CrewAI's own telemetry; these tests need a working one
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)


LOOKUP = ToolSpec(
    name="lookup",
    description="Find an order",
    parameters={"type": "object", "properties": {"order_id": {"type": "string"}}},
)


def sample_trace() -> Trace:
    """A stopped run: a lookup, a refund that failed, an answer, with a loop alert (six
    spans: the agent, three model calls, two tool calls)."""
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
        tools=[LOOKUP],
        session_id="s-1",
        framework="langchain",
        metadata={"user_id": "u-7", "tags": ["beta"]},
        status=RunStatus.STOPPED,
        status_reason="loop guard",
    )
    trace.alerts = [
        LoopAlert(
            session_id="s-1",
            trace_id=trace.id,
            pattern="repeated_call",
            count=3,
            message="refund 3 times",
            time=1001.5,
        )
    ]
    # 1767229200.1 and friends: floats whose nanoseconds `t * 1e9` would round wrongly
    for index, span in enumerate(trace.spans):
        span.start_time = 1767229200.1 + index * 0.3
        span.end_time = span.start_time + 0.1
    trace.spans[0].end_time = 1767229210.7
    trace.start_time, trace.end_time = 1767229200.0, 1767229211.0
    trace.spans[1].input = [[{"role": "human", "content": "Where is order A-1?"}]]
    trace.spans[1].attributes = {
        "gen_ai.request.model": "m-1",
        "gen_ai.provider.name": "openai",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 5,
        "agenteval.stop_sequences": ["\n\n"],
        "agenteval.nothing": None,
    }
    trace.spans[4].error = "PermissionError: denied"
    return trace


def exported(trace: Trace, *results: Any, **options: Any) -> list[ReadableSpan]:
    """The finished spans of one export through an SDK provider (scores as span events)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    OTelExporter(provider, score_events="spans").export(trace, *results, **options)
    return list(memory.get_finished_spans())


def by_name(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def test_round_trip_gives_the_same_trace(tmp_path: Path) -> None:
    trace = sample_trace()
    path = tmp_path / "otlp.json"
    path.write_text(json.dumps(otlp_json(exported(trace))))
    [back] = import_otlp(path)
    assert back == trace
    assert [s.start_time for s in back.spans] == [s.start_time for s in trace.spans]


def run_of_one(span: Span) -> Trace:
    """A run of session "s-1" whose agent made one call, ``span`` (its times set)."""
    span = span.model_copy(update={"parent_id": "a", "start_time": 1.5, "end_time": 2.5})
    agent = Span(id="a", kind=SpanKind.AGENT, name="agent", start_time=1.0, end_time=3.0)
    return Trace(input="q", output="done", session_id="s-1", spans=[agent, span])


def test_a_long_conversations_model_call_keeps_its_own_attributes_within_the_limit() -> None:
    # a model call sent 60 messages: OpenInference's copy, a field per message, took it past
    # the SDK's 128 attributes, and the SDK dropped the oldest set: the span's kind, id,
    # session and operation, so a backend showed a span of no kind in no session
    sent = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}"}
        for n in range(60)
    ]
    trace = run_of_one(
        Span(
            id="m",
            kind=SpanKind.LLM,
            name="gpt-4o",
            input=sent,
            output="done",
            attributes={"gen_ai.request.model": "gpt-4o"},
        )
    )
    model = by_name(exported(trace))["chat gpt-4o"]
    attributes = dict(model.attributes or {})
    assert len(attributes) <= 128 and model.dropped_attributes == 0
    assert (
        attributes["openinference.span.kind"],
        attributes["agenteval.span.id"],
        attributes["gen_ai.conversation.id"],
        attributes["gen_ai.operation.name"],
    ) == ("LLM", "m", "s-1", "chat")
    # the latest messages whole, numbered from 0, the count left out said; all of them
    # still in gen_ai.input.messages
    left_out = attributes["agenteval.llm.input_messages.left_out"]
    shown = [attributes[f"llm.input_messages.{n}.message.content"] for n in range(60 - left_out)]
    assert shown == [f"message {n}" for n in range(left_out, 60)]
    assert f"llm.input_messages.{60 - left_out}.message.role" not in attributes
    assert len(json.loads(attributes["gen_ai.input.messages"])) == 60
    [back] = import_otlp(json.dumps(otlp_json(exported(trace))))
    assert back == trace


def test_values_past_a_length_limit_are_cut_visibly_and_json_stays_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=1000: the SDK cut each longer value where the limit
    # fell, unmarked; the tools offered and the calls a model asked for, cut mid-JSON, made
    # the import of the file raise (ValidationError), and a page read came back as its
    # first 1,000 characters, as if that were all it said
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "1000")
    page = "".join(f"line {n} of the refund policy. " for n in range(200))  # 5,890 chars
    described = [
        ToolSpec(
            name=f"tool_{n}",
            description=f"Tool {n}: " + "does one careful thing. " * 20,
            parameters={"type": "object", "properties": {"order_id": {"type": "string"}}},
        )
        for n in range(3)
    ]
    trace = sample_trace()
    trace.tools = [LOOKUP, *described]
    read = trace.spans[2].tool_call
    assert read is not None
    read.result = page
    spans = exported(trace)
    for span in spans:
        for key, value in (span.attributes or {}).items():
            assert not isinstance(value, str) or len(value) <= 1000, key
    [back] = import_otlp(json.dumps(otlp_json(spans)))
    # the page: its start and the marker of its size, within the limit
    result = back.spans[2].tool_call.result  # type: ignore[union-attr]
    kept = result.removesuffix(f"…[truncated: {len(page)} characters in all]")
    assert kept != result and page.startswith(kept) and len(kept) > 800
    # the tools: whole, but for their long descriptions, each cut visibly
    assert [(t.name, t.parameters) for t in back.tools] == [
        (t.name, t.parameters) for t in trace.tools
    ]
    assert back.tools[0].description == LOOKUP.description
    for got, want in zip(back.tools[1:], described, strict=True):
        kept = got.description.removesuffix(
            f"…[truncated: {len(want.description)} characters in all]"
        )
        assert kept != got.description and want.description.startswith(kept)
    assert back.tool_calls()[1] == trace.tool_calls()[1]
    assert back.spans[1].requested_tool_calls == trace.spans[1].requested_tool_calls


def test_a_record_that_cannot_fit_a_length_limit_is_named_not_made_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # forty tools whose names, schemas and keys alone take more than 1,000 characters: cut
    # as text, the file cannot give them back; the import says so on the root span
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "1000")
    trace = sample_trace()
    trace.tools = [LOOKUP.model_copy(update={"name": f"lookup_{n}"}) for n in range(40)]
    [back] = import_otlp(json.dumps(otlp_json(exported(trace))))
    assert back.tools == []
    assert back.spans[0].attributes["agenteval.otel.unreadable"] == ["agenteval.trace.tools"]
    assert "agenteval.otel.unreadable" not in back.spans[1].attributes
    assert (back.input, back.output, back.tool_calls()) == (
        trace.input,
        trace.output,
        trace.tool_calls(),
    )


def test_a_retrieval_of_many_documents_keeps_its_own_attributes_and_its_top_documents() -> None:
    # 50 documents, three fields each: the top ones whole, the span's own attributes kept
    found = [{"id": f"d{n}", "content": f"text {n}", "score": 1 - n / 100} for n in range(50)]
    trace = run_of_one(
        Span(id="r", kind=SpanKind.RETRIEVER, name="retriever", input="refund", output=found)
    )
    retrieval = by_name(exported(trace))["retrieval retriever"]
    attributes = dict(retrieval.attributes or {})
    assert len(attributes) <= 128 and retrieval.dropped_attributes == 0
    assert (attributes["agenteval.span.id"], attributes["session.id"]) == ("r", "s-1")
    listed = sorted(int(key.split(".")[2]) for key in attributes if key.endswith(".document.id"))
    assert listed == list(range(len(listed))) and 30 < len(listed) < 50
    assert [attributes[f"retrieval.documents.{n}.document.id"] for n in listed] == [
        f"d{n}" for n in listed
    ]
    [back] = import_otlp(json.dumps(otlp_json(exported(trace))))
    assert back == trace


def test_spans_are_named_and_attributed_after_the_genai_conventions_and_openinference() -> None:
    finished = exported(sample_trace())
    spans = by_name(finished)
    assert sorted(spans) == [
        "chat agent_step",
        "chat m-1",
        "execute_tool lookup",
        "execute_tool refund",
        "invoke_agent agent",
    ]
    root = spans["invoke_agent agent"].attributes
    assert (root["gen_ai.operation.name"], root["openinference.span.kind"]) == (
        "invoke_agent",
        "AGENT",
    )
    assert (root["gen_ai.agent.name"], root["agent.name"]) == ("agent", "agent")
    assert root["gen_ai.provider.name"] == "openai"  # its model calls' provider
    assert (root["input.value"], root["input.mime_type"]) == ("Where is order A-1?", "text/plain")
    assert root["output.value"] == "It shipped; the refund was denied."
    assert (root["session.id"], root["gen_ai.conversation.id"], root["user.id"]) == (
        "s-1",
        "s-1",
        "u-7",
    )
    assert json.loads(root["metadata"]) == {"user_id": "u-7", "tags": ["beta"]}
    assert root["agenteval.trace.status"] == "stopped"

    llm = spans["chat m-1"].attributes
    assert (llm["gen_ai.operation.name"], llm["openinference.span.kind"]) == ("chat", "LLM")
    assert (llm["gen_ai.request.model"], llm["llm.model_name"]) == ("m-1", "m-1")
    assert (llm["gen_ai.provider.name"], llm["llm.provider"]) == ("openai", "openai")
    assert (
        llm["llm.token_count.prompt"],
        llm["llm.token_count.completion"],
        llm["llm.token_count.total"],
    ) == (12, 5, 17)
    assert json.loads(llm["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Where is order A-1?"}]}
    ]
    assert json.loads(llm["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "c1",
                    "name": "lookup",
                    "arguments": {"order_id": "A-1"},
                }
            ],
            "finish_reason": "tool_call",
        }
    ]
    assert llm["llm.input_messages.0.message.role"] == "user"
    assert llm["llm.input_messages.0.message.content"] == "Where is order A-1?"
    called = "llm.output_messages.0.message.tool_calls.0.tool_call"
    assert (
        llm[f"{called}.id"],
        llm[f"{called}.function.name"],
        json.loads(llm[f"{called}.function.arguments"]),
    ) == ("c1", "lookup", {"order_id": "A-1"})
    definition = {
        "type": "function",
        "name": "lookup",
        "description": "Find an order",
        "parameters": LOOKUP.parameters,
    }
    assert json.loads(llm["gen_ai.tool.definitions"]) == [definition]
    assert json.loads(llm["llm.tools.0.tool.json_schema"]) == definition

    tool = spans["execute_tool lookup"].attributes
    assert (tool["gen_ai.operation.name"], tool["openinference.span.kind"]) == (
        "execute_tool",
        "TOOL",
    )
    assert (tool["gen_ai.tool.name"], tool["tool.name"], tool["gen_ai.tool.call.id"]) == (
        "lookup",
        "lookup",
        "c1",
    )
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"order_id": "A-1"}
    assert json.loads(tool["gen_ai.tool.call.result"]) == {"status": "shipped"}
    assert (tool["input.mime_type"], json.loads(tool["input.value"])) == (
        "application/json",
        {"order_id": "A-1"},
    )
    assert tool["tool.description"] == "Find an order"

    failed = spans["execute_tool refund"]
    assert "gen_ai.tool.call.result" not in failed.attributes  # it returned nothing
    assert failed.attributes["error.type"] == "PermissionError"
    assert (failed.status.status_code.name, failed.status.description) == (
        "ERROR",
        "PermissionError: denied",
    )
    [exception] = failed.events
    assert (exception.name, dict(exception.attributes or {})) == (
        "exception",
        {"exception.type": "PermissionError", "exception.message": "PermissionError: denied"},
    )
    steps = [span.attributes for span in finished if span.name == "chat agent_step"]
    assert [step.get("output.value") for step in steps] == [
        None,  # the refund step said nothing
        "It shipped; the refund was denied.",
    ][:: -1 if steps[0].get("output.value") else 1]


def test_a_model_calls_finish_reason_is_exported_as_its_provider_said() -> None:
    # an answer cut at the token limit ends "length", not the "stop" a reply is assumed
    cut = Span(
        id="m",
        kind=SpanKind.LLM,
        name="m-1",
        output="A-1 has shipped and",
        attributes={"gen_ai.response.finish_reasons": ["length"]},
    )
    trace = Trace(input="Where is A-1?", spans=[cut])
    [span] = exported(trace)
    assert json.loads(span.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "A-1 has shipped and"}],
            "finish_reason": "length",
        }
    ]
    [back] = import_otlp_json(otlp_json([span]))
    assert back.spans[0].attributes == cut.attributes


def test_a_graph_or_crew_at_the_root_is_a_workflow() -> None:
    root = Span(id="r", kind=SpanKind.CHAIN, name="LangGraph", input="hi", output="hello")
    node = Span(id="n", parent_id="r", kind=SpanKind.CHAIN, name="model")
    trace = Trace(id="t", input="hi", output="hello", spans=[root, node])
    spans = by_name(exported(trace))
    assert spans["invoke_workflow LangGraph"].attributes["gen_ai.operation.name"] == (
        "invoke_workflow"
    )
    # a node inside the graph is no GenAI operation: no operation name is made up for it
    assert "gen_ai.operation.name" not in spans["model"].attributes
    assert spans["model"].attributes["openinference.span.kind"] == "CHAIN"

    # a crew: the run holds agents of its own, so it is a workflow that invokes them
    crew = Span(id="c", kind=SpanKind.AGENT, name="crew")
    worker = Span(id="w", parent_id="c", kind=SpanKind.AGENT, name="support")
    spans = by_name(exported(Trace(id="t2", spans=[crew, worker])))
    assert sorted(spans) == ["invoke_agent support", "invoke_workflow crew"]
    workflow = spans["invoke_workflow crew"].attributes
    # GenAI conventions v0.1.0: the workflow is an invoke_agent span whose operation stays
    # invoke_workflow, named by gen_ai.agent.name (gen_ai.workflow.name is gone)
    assert (workflow["gen_ai.operation.name"], workflow["gen_ai.agent.name"]) == (
        "invoke_workflow",
        "crew",
    )
    assert "gen_ai.workflow.name" not in workflow
    assert spans["invoke_workflow crew"].kind is OTelSpanKind.INTERNAL
    assert spans["invoke_agent support"].attributes["gen_ai.agent.name"] == "support"


def event_attributes(span: ReadableSpan) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == "gen_ai.evaluation.result"]


def test_scores_are_evaluation_events_on_the_spans_they_evaluate() -> None:
    trace = sample_trace()
    trace.tools.append(
        ToolSpec(
            name="refund",
            parameters={
                "type": "object",
                "properties": {"order_id": {"type": "integer"}},
            },
        )
    )
    accuracy = ToolCallAccuracy().measure(trace.model_copy())
    per_call = ParameterCorrectness().measure(trace.model_copy())
    session = MetricResult(
        name="agent_reliability", version="1", score=0.25, threshold=0.5, success=False
    )
    spans = by_name(exported(trace, [accuracy, per_call], [session]))
    on_root = event_attributes(spans["invoke_agent agent"])
    assert [e["gen_ai.evaluation.name"] for e in on_root] == [
        "tool_call_accuracy",
        "parameter_correctness",
        "agent_reliability",
    ]
    # lookup's arguments fit its schema (1.0); refund's order_id is not an integer (0.0)
    assert on_root[1]["gen_ai.evaluation.score.value"] == 0.5
    assert on_root[1]["gen_ai.evaluation.score.label"] == "fail"
    assert on_root[1]["gen_ai.evaluation.explanation"] == "2 calls checked, 1 with schema errors"
    assert on_root[2] == {
        "gen_ai.evaluation.name": "agent_reliability",
        "gen_ai.evaluation.explanation": "",
        "gen_ai.evaluation.score.value": 0.25,
        "gen_ai.evaluation.score.label": "fail",
        "agenteval.metric.version": "1",
        "agenteval.threshold": 0.5,
        "agenteval.status": "ok",
        "agenteval.evaluation.scope": "session",
    }
    [lookup] = event_attributes(spans["execute_tool lookup"])
    [refund] = event_attributes(spans["execute_tool refund"])
    assert (lookup["gen_ai.evaluation.name"], lookup["gen_ai.evaluation.score.value"]) == (
        "parameter_correctness",
        1.0,
    )
    assert (refund["gen_ai.evaluation.score.value"], refund["gen_ai.evaluation.score.label"]) == (
        0.0,
        "fail",
    )
    assert json.loads(refund["gen_ai.evaluation.explanation"])["schema_valid"] is False


def test_export_reaches_a_real_otlp_endpoint_and_reads_back(otlp_receiver: OTLPReceiver) -> None:
    trace = sample_trace()
    exporter = OTelExporter(endpoint=otlp_receiver.url, project="shop")
    exporter.export(trace)
    exporter.shutdown()
    assert exporter.failed == 0
    assert len(otlp_receiver.spans()) == len(trace.spans)
    [resource] = [r for d in otlp_receiver.documents for r in d["resourceSpans"]]
    resource_attributes = {a["key"]: a["value"] for a in resource["resource"]["attributes"]}
    assert resource_attributes["openinference.project.name"] == {"stringValue": "shop"}
    # the collector's protobuf, as JSON with base64 ids, imports to the trace that was sent
    [back] = import_otlp(otlp_receiver.documents)
    assert back == trace


def test_a_failed_export_is_reported_never_silent(otlp_receiver: OTLPReceiver) -> None:
    otlp_receiver.status = 503
    exporter = OTelExporter(endpoint=otlp_receiver.url, timeout=1)
    exporter.export(sample_trace())
    with pytest.raises(ExportError, match=rf"6 span\(s\) not accepted by {otlp_receiver.url}"):
        exporter.flush()
    assert exporter.failed == 6


def test_replay_exports_and_a_refusing_endpoint_fails_the_command(
    otlp_receiver: OTLPReceiver, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    trace = sample_trace()
    with CaptureWriter(capture) as writer:
        writer.write(trace)
        writer.write(trace)  # its line shipped twice: the trace goes out once
    sink = OTelSink(endpoint=otlp_receiver.url)
    assert replay(capture, sinks=[sink]).repeated_traces == 1
    assert sink.problem is None and len(otlp_receiver.spans()) == 6

    ok = CliRunner().invoke(
        cli, ["replay", str(capture), "-q", "--otel-endpoint", otlp_receiver.url]
    )
    assert ok.exit_code == 0, ok.output
    assert f"exported 1 trace(s) to {otlp_receiver.url}" in ok.output
    # the endpoint passes the preflight check, then refuses the spans: said once, at the end
    otlp_receiver.probe_status, otlp_receiver.status = 200, 401
    refused = CliRunner().invoke(
        cli, ["replay", str(capture), "-q", "--otel-endpoint", otlp_receiver.url]
    )
    assert refused.exit_code == 1
    expected = (
        f"agenteval: error: export to {otlp_receiver.url} incomplete: 6 span(s) not accepted "
        f"by {otlp_receiver.url}"
    )
    assert expected in refused.output
    assert refused.output.count("not accepted") == 1, refused.output


def test_an_endpoint_that_cannot_take_the_export_is_found_before_scoring(
    otlp_receiver: OTLPReceiver, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    with CaptureWriter(capture) as writer:
        writer.write(sample_trace())
    otlp_receiver.status = 401
    refused = CliRunner().invoke(
        cli, ["replay", str(capture), "-q", "--otel-endpoint", otlp_receiver.url]
    )
    assert refused.exit_code == 2
    assert refused.output == (
        f"agenteval: error: {otlp_receiver.url} refused an OTLP export: HTTP 401 (check the API "
        "key); check --otel-endpoint\n"
    )
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = f"http://127.0.0.1:{port}"
    unreachable = CliRunner().invoke(cli, ["replay", str(capture), "--phoenix", down])
    assert unreachable.exit_code == 2
    # one line, before any scoring: no table, no per-trace repetition, no Python advice
    assert unreachable.output == (
        f"agenteval: error: no OTLP endpoint answers at {down}/v1/traces (connection refused); "
        "check --phoenix\n"
    )
    # the Python API fails as early: replay runs the sink's preflight before scoring
    with pytest.raises(ExportError, match="connection refused"):
        replay(capture, sinks=[OTelSink(phoenix=down)])


# --- the file shapes tools write ---------------------------------------------------------


def test_json_lines_snake_case_and_the_sdk_span_json_import_alike(tmp_path: Path) -> None:
    trace = sample_trace()
    spans = exported(trace)
    document = otlp_json(spans)

    lines = tmp_path / "spans.jsonl"  # one OTLP document per line, a span in each
    lines.write_text(
        "\n".join(
            json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})
            for span in document["resourceSpans"][0]["scopeSpans"][0]["spans"]
        )
    )
    assert import_otlp(lines) == [trace]

    def snake(value: Any) -> Any:  # Phoenix's /spans/otlpv1: protobuf field names
        if isinstance(value, dict):
            return {
                "".join(f"_{c.lower()}" if c.isupper() else c for c in key): snake(v)
                for key, v in value.items()
            }
        return [snake(v) for v in value] if isinstance(value, list) else value

    assert import_otlp(snake(document)) == [trace]

    console = tmp_path / "console.json"  # the SDK console/file exporter: pretty-printed spans
    console.write_text("\n".join(span.to_json() for span in spans))
    [from_console] = import_otlp(console)
    # its times are ISO strings to the microsecond: equal to that rounding
    assert [round(s.start_time or 0, 6) for s in from_console.spans] == [
        round(s.start_time or 0, 6) for s in trace.spans
    ]
    for span in from_console.spans + trace.spans:
        span.start_time = span.end_time = None
    assert from_console == trace


def test_a_phoenix_span_export_imports() -> None:
    # Phoenix's /v1/projects/{project}/spans: a context object, attributes as one dict
    document = {
        "data": [
            {
                "name": "execute_tool get_weather",
                "context": {"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "2"},
                "parent_id": "1",
                "span_kind": "TOOL",
                "start_time": "2026-01-01T00:00:01+00:00",
                "end_time": "2026-01-01T00:00:02.500000+00:00",
                "status_code": "ERROR",
                "status_message": "TimeoutError: slow",
                "attributes": {
                    "openinference": {"span": {"kind": "TOOL"}},
                    "tool": {"name": "get_weather"},
                    "input": {"value": '{"city": "Oslo"}', "mime_type": "application/json"},
                },
                "events": [],
            },
            {
                "name": "agent",
                "context": {"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "1"},
                "parent_id": None,
                "start_time": "2026-01-01T00:00:00+00:00",
                "end_time": "2026-01-01T00:00:03+00:00",
                "status_code": "OK",
                "attributes": {
                    "openinference.span.kind": "AGENT",
                    "input.value": "Weather in Oslo?",
                    "session.id": "conv-1",
                },
            },
        ],
        "next_cursor": None,
    }
    [trace] = import_otlp(document)
    assert (trace.input, trace.session_id, trace.start_time) == (
        "Weather in Oslo?",
        "conv-1",
        1767225600.0,
    )
    assert [(s.kind, s.name, s.parent_id) for s in trace.spans] == [
        (SpanKind.AGENT, "agent", None),
        (SpanKind.TOOL, "get_weather", "1"),
    ]
    assert trace.tool_calls() == [
        ToolCall(name="get_weather", arguments={"city": "Oslo"}, error="TimeoutError: slow")
    ]
    assert trace.spans[1].end_time == 1767225602.5


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"resourceSpans": []}\n{oops', r"spans\.json:2: not JSON \(Expecting property name"),
        (  # lines counted across pretty-printed documents and blank lines
            '{"resourceSpans": []}\n\n{\n  "resourceSpans": []\n}\n{oops',
            r"spans\.json:6: not JSON \(Expecting property name",
        ),
        ('{"resourceSpans": []}', r"spans\.json: holds no spans"),
        (
            '{"traces": [1]}',
            r"spans\.json:1: not an OpenTelemetry span or OTLP document \(keys: traces\)",
        ),
        ("[1, 2]", r"spans\.json:1: expected a JSON object, got int"),
        (  # a collector's archived file
            "\x1f\udc8b\x08\x00",  # bytes 1f 8b: gzip's magic
            r"spans\.json: a gzip-compressed file; decompress it first \(gunzip -k .*spans\.json\)",
        ),
        (  # the line of the byte, past a document and a character cut by the pieces
            '{"resourceSpans": []}\n{"name": "caf\u00e9",\n "x": "\udcff"}',
            r"spans\.json:3: not UTF-8 \(byte 0xff: invalid start byte\)",
        ),
    ],
)
@pytest.mark.parametrize("piece", [_otlp.PIECE, 5])
def test_what_is_not_a_span_file_is_said_with_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str, message: str, piece: int
) -> None:
    """Said alike when the file is read whole and when 5-byte pieces cut every document."""
    monkeypatch.setattr(_otlp, "PIECE", piece)
    path = tmp_path / "spans.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(CaptureError, match=message):
        import_otlp(path)


def spans_of(trace: Trace) -> list[dict[str, Any]]:
    """A trace's spans in OTLP JSON, in the order they ended (the root last)."""
    document = otlp_json(exported(trace))
    return list(document["resourceSpans"][0]["scopeSpans"][0]["spans"])


def test_a_span_file_is_imported_a_trace_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collector's file: traces A and B interleaved, then C, one span a line, with text
    that is not ASCII. Read in 7-byte pieces, every document and character is cut. The
    traces come back whole, in the order of their first spans, and each as soon as its last
    span is read: A before C's lines are read."""
    monkeypatch.setattr(_otlp, "PIECE", 7)
    traces = []
    for name in "ABC":
        trace = sample_trace()
        trace.id, trace.input = f"trace-{name}", f"Où est la commande {name}? 注文"
        traces.append(trace)
    a, b, c = (spans_of(trace) for trace in traces)
    interleaved = [span for pair in zip(a, b, strict=True) for span in pair] + c
    path = tmp_path / "spans.jsonl"
    lines = [
        json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}, ensure_ascii=False)
        for span in interleaved
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    size = path.stat().st_size
    read: list[int] = []
    given = iter_otlp(path, on_progress=read.append)
    assert sum(read) == size  # the file was checked whole before any trace was given
    first = next(given)
    c_bytes = sum(len(line.encode()) + 1 for line in lines[-len(c) :])
    assert first == traces[0]
    assert sum(read) - size < size - c_bytes  # A came before C's spans were read
    assert [first, *given] == traces
    assert sum(read) == 2 * size
    assert import_otlp(path) == traces


def test_a_span_file_with_a_byte_order_mark_imports(tmp_path: Path) -> None:
    """Some Windows tools start UTF-8 files with a byte order mark, which is no JSON."""
    trace = sample_trace()
    path = tmp_path / "spans.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(otlp_json(exported(trace))).encode())
    assert import_otlp(path) == [trace]


def test_a_bad_span_file_writes_nothing(tmp_path: Path) -> None:
    """The import command checks the whole file first: a bad last line leaves no capture
    with half the traces in it."""
    path = tmp_path / "spans.jsonl"
    good = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans_of(sample_trace())}]}]})
    path.write_text(good + "\n" + '{"resourceSpans": [' + "\n")
    capture = tmp_path / "capture.jsonl"
    result = CliRunner().invoke(cli, ["import", str(path), "-o", str(capture)])
    assert result.exit_code == 2
    assert f"{path}:2: not JSON (Expecting value)" in result.output
    assert not capture.exists()


def test_import_command_writes_a_capture(tmp_path: Path) -> None:
    trace = sample_trace()
    spans = tmp_path / "spans.json"
    spans.write_text(json.dumps(otlp_json(exported(trace))))
    capture = tmp_path / "capture.jsonl"
    result = CliRunner().invoke(cli, ["import", str(spans), "-o", str(capture)])
    assert result.exit_code == 0, result.output
    assert f"imported 1 trace(s), 6 span(s), from {spans} into {capture}" in result.output
    assert list(read_capture(capture)) == [trace]
    missing = CliRunner().invoke(cli, ["import", str(tmp_path / "nope.json"), "-o", str(capture)])
    assert missing.exit_code == 2
    assert "nope.json: no such file" in missing.output


def test_import_says_when_traces_hold_no_llm_or_tool_span(tmp_path: Path) -> None:
    """As OpenInference's CrewAI instrumentor writes them: a crew span and nothing inside."""
    document = {
        "data": [
            {
                "name": "Crew.kickoff",
                "context": {"trace_id": f"{i:032x}", "span_id": f"{i:016x}"},
                "parent_id": None,
                "start_time": "2026-01-01T00:00:00+00:00",
                "end_time": "2026-01-01T00:00:03+00:00",
                "status_code": "OK",
                "attributes": {"openinference.span.kind": "CHAIN", "output.value": "Done."},
            }
            for i in (1, 2)
        ]
    }
    spans, capture = tmp_path / "crew.json", tmp_path / "capture.jsonl"
    spans.write_text(json.dumps(document))
    result = CliRunner().invoke(cli, ["import", str(spans), "-o", str(capture)])
    assert result.exit_code == 0, result.output
    assert (
        f"agenteval: warning: {spans}: 2 of 2 trace(s) hold no LLM or tool span, so only their "
        "input and output can be scored (the metrics of tool calls and trajectories skip "
        "them); 2 of them have no input either"
    ) in result.output
    traces = list(read_capture(capture))
    assert [trace.output for trace in traces] == ["Done.", "Done."]
    assert [trace.steps_recorded for trace in traces] == [False, False]
    # the crew ran tools the spans do not show: "no tool calls" would be a made-up pass
    scored: dict[str, list[MetricResult]] = {}
    replay(capture, on_trace=lambda trace, results: scored.update({trace.id: results}))
    unknown = (
        "not scored: the trace was imported from spans that record no model or tool call, "
        "only the run's input and output, so its steps are unknown"
    )
    for trace in traces:
        steps = {
            r.name: (r.score, r.skipped, r.reason, r.metadata)
            for r in scored[trace.id]
            if r.name in ("tool_failures", "tool_call_loops", "parameter_correctness")
        }
        assert steps == {
            name: (None, True, unknown, {"steps_recorded": False})
            for name in ("tool_failures", "tool_call_loops", "parameter_correctness")
        }


def test_import_leaves_out_spans_of_no_run_and_says_how_many(tmp_path: Path) -> None:
    """As OpenInference writes building a LlamaIndex index (each step a trace of its own)
    beside a run: the splitter (framework objects in, nodes out) and the embeddings (texts
    in, no answer) are no run; they imported as "ok" agent runs that coherence passed."""

    def span(trace: int, name: str, attributes: dict[str, str]) -> dict[str, Any]:
        return {
            "name": name,
            "context": {"trace_id": f"{trace:032x}", "span_id": f"{trace:016x}"},
            "parent_id": None,
            "start_time": "2026-01-01T00:00:00+00:00",
            "end_time": "2026-01-01T00:00:01+00:00",
            "status_code": "OK",
            "attributes": {"openinference.span.kind": "CHAIN", **attributes},
        }

    as_json = {"input.mime_type": "application/json", "output.mime_type": "application/json"}
    document = {
        "data": [
            span(
                1,
                "SentenceSplitter.__call__",
                {
                    **as_json,
                    "input.value": '{"nodes": ["<Document(id_=d1)>"]}',
                    "output.value": '["<TextNode(id_=n1)>"]',
                },
            ),
            span(
                2,
                "MockEmbedding.get_text_embedding_batch",
                {**as_json, "input.value": '{"texts": ["Order A-1 shipped on Monday."]}'},
            ),
            span(3, "Workflow.run", {"output.value": "Refunded."}),  # a workflow's answer
        ]
    }
    spans, capture = tmp_path / "index.json", tmp_path / "capture.jsonl"
    spans.write_text(json.dumps(document))
    left_out: list[str] = []
    assert [t.output for t in iter_otlp(spans, on_left_out=left_out.append)] == ["Refunded."]
    assert left_out == [f"{1:032x}", f"{2:032x}"]
    result = CliRunner().invoke(cli, ["import", str(spans), "-o", str(capture)])
    assert result.exit_code == 0, result.output
    assert (
        "left out 2 trace(s) that record no run (an agent being made, an index being built: "
        "no model, tool or retrieval call, no agent, no request or answer in text)"
    ) in result.output
    assert [trace.output for trace in read_capture(capture)] == ["Refunded."]


def attr(key: str, value: object) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def test_genai_convention_spans_import() -> None:
    # spans as a GenAI-conventions instrumentor writes them: no OpenInference, no agenteval
    def span(span_id: str, parent: str, name: str, start: int, *attributes: Any) -> Any:
        return {
            "traceId": "5b8efff798038103d269b633813fc60c",
            "spanId": span_id,
            "parentSpanId": parent,
            "name": name,
            "startTimeUnixNano": str(start * 10**9),
            "endTimeUnixNano": str(start * 10**9 + 5 * 10**8),
            "attributes": list(attributes),
        }

    messages = [
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "Search the web for it."},
                {"type": "tool_call", "id": "t1", "name": "search", "arguments": {"q": "otel"}},
            ],
        }
    ]
    document = [
        span(
            "eee19b7ec3c1b174",
            "",
            "invoke_agent helper",
            1,
            attr("gen_ai.operation.name", "invoke_agent"),
            attr("gen_ai.agent.name", "helper"),
            attr("gen_ai.conversation.id", "c-9"),
        ),
        span(
            "eee19b7ec3c1b175",
            "eee19b7ec3c1b174",
            "chat gpt-4o",
            2,
            attr("gen_ai.operation.name", "chat"),
            attr("gen_ai.request.model", "gpt-4o"),
            attr("gen_ai.usage.input_tokens", 30),
            attr(
                "gen_ai.input.messages",
                json.dumps([{"role": "user", "parts": [{"type": "text", "content": "find otel"}]}]),
            ),
            attr("gen_ai.output.messages", json.dumps(messages)),
        ),
        span(
            "eee19b7ec3c1b176",
            "eee19b7ec3c1b174",
            "execute_tool search",
            3,
            attr("gen_ai.operation.name", "execute_tool"),
            attr("gen_ai.tool.name", "search"),
            attr("gen_ai.tool.call.id", "t1"),
            attr("gen_ai.tool.call.arguments", '{"q": "otel"}'),
            attr("gen_ai.tool.call.result", '["opentelemetry.io"]'),
        ),
    ]
    [trace] = import_otlp({"resourceSpans": [{"scopeSpans": [{"spans": document}]}]})
    assert [(s.kind, s.name) for s in trace.spans] == [
        (SpanKind.AGENT, "helper"),
        (SpanKind.LLM, "chat gpt-4o"),
        (SpanKind.TOOL, "search"),
    ]
    assert trace.session_id == "c-9"
    llm = trace.spans[1]
    assert llm.attributes == {
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": 30,
        REASONING: "Search the web for it.",
    }
    assert [(c.id, c.name, c.arguments) for c in llm.requested_tool_calls] == [
        ("t1", "search", {"q": "otel"})
    ]
    assert trace.tool_calls() == [
        ToolCall(id="t1", name="search", arguments={"q": "otel"}, result=["opentelemetry.io"])
    ]


def test_scores_become_phoenix_annotations_once_phoenix_has_the_spans(
    otlp_receiver: OTLPReceiver,
) -> None:
    trace = sample_trace()
    result = ParameterCorrectness().measure(trace.model_copy())
    assert (result.score, result.success) == (1.0, True)  # lookup's arguments fit its schema
    # Phoenix answers 404 until it has stored the spans the annotations name
    otlp_receiver.annotation_statuses.extend([404, 404])
    exporter = OTelExporter(phoenix=otlp_receiver.base_url)
    where = exporter.export(trace, [result])
    exporter.shutdown()
    assert [path for path, _ in otlp_receiver.annotation_posts] == [
        "/v1/span_annotations?sync=true"
    ] * 3
    on_trace, on_call = otlp_receiver.annotation_posts[-1][1]["data"]
    metadata = {
        "metric_version": result.version,
        "threshold": 0.7,
        "judge_model": None,
        "source": "agenteval",
    }
    assert on_trace == {
        "span_id": where.span_ids[trace.spans[0].id],
        "name": "parameter_correctness",
        "annotator_kind": "CODE",
        "result": {
            "label": "pass",
            "score": 1.0,
            "explanation": "1 calls checked, 0 with schema errors",
        },
        "metadata": metadata,
        "identifier": "agenteval.parameter_correctness",
    }
    lookup = next(s for s in trace.spans if s.name == "lookup")
    assert on_call["span_id"] == where.span_ids[lookup.id]
    assert (on_call["name"], on_call["result"]["label"], on_call["result"]["score"]) == (
        "parameter_correctness",
        "pass",
        1.0,
    )
    assert exporter.phoenix is not None and exporter.phoenix.sent == 2
    assert len(otlp_receiver.spans()) == 6  # the spans went to Phoenix's OTLP endpoint


def test_a_refused_annotation_is_reported(otlp_receiver: OTLPReceiver) -> None:
    trace = sample_trace()
    otlp_receiver.annotation_statuses.append(401)
    exporter = OTelExporter(phoenix=otlp_receiver.base_url)
    exporter.export(trace, [ToolCallAccuracy().measure(trace.model_copy())])
    with pytest.raises(ExportError, match=r"Phoenix annotations: .*/v1/span_annotations: HTTP 401"):
        exporter.shutdown()
    assert len(otlp_receiver.annotation_posts) == 1  # refused: not retried


def test_a_trace_without_spans_or_with_an_orphan_span_round_trips() -> None:
    # a trace built by hand: one span stands for the run, so a backend shows it
    bare = Trace(id="bare", input="Where is A-1?", output="Shipped.", session_id="s-2")
    [stand_in] = exported(bare)
    assert stand_in.name == "invoke_agent agent"
    assert (stand_in.attributes["input.value"], stand_in.attributes["output.value"]) == (
        "Where is A-1?",
        "Shipped.",
    )
    # a span whose parent was never recorded stays in the run's OTel trace, under its root
    orphaned = sample_trace()
    orphaned.spans[3].parent_id = "never-recorded"
    spans = exported(orphaned)
    assert len({span.context.trace_id for span in spans}) == 1
    back = import_otlp(otlp_json([stand_in, *spans]))
    assert sorted(back, key=lambda t: t.id != "bare") == [bare, orphaned]


# --- scores as log events, ids that repeat, deadlines ----------------------------------


def test_scores_are_log_events_parented_to_the_spans_they_evaluate(
    otlp_receiver: OTLPReceiver,
) -> None:
    trace = sample_trace()
    per_call = ParameterCorrectness().measure(trace.model_copy())
    session = MetricResult(
        name="agent_reliability", version="1", score=0.25, threshold=0.5, success=False
    )
    exporter = OTelExporter(endpoint=otlp_receiver.url)
    assert (exporter.score_events, exporter.logs_endpoint) == (
        "logs",
        f"{otlp_receiver.base_url}/v1/logs",
    )
    where = exporter.export(trace, [per_call], [session])
    exporter.shutdown()
    assert exporter.failed == 0
    # no span carries a score: the span events the conventions move away from are not used
    assert all(
        event["name"] != "gen_ai.evaluation.result"
        for span in otlp_receiver.spans()
        for event in span.get("events", [])
    )
    records = otlp_receiver.log_records()
    assert [r["eventName"] for r in records] == ["gen_ai.evaluation.result"] * 3

    def attributes(record: dict[str, Any]) -> dict[str, Any]:
        return {a["key"]: next(iter(a["value"].values())) for a in record["attributes"]}

    def hex_id(value: str) -> str:
        return base64.b64decode(value).hex()

    root = where.span_ids[trace.spans[0].id]
    lookup = where.span_ids[next(s.id for s in trace.spans if s.name == "lookup")]
    seen = [(hex_id(r["traceId"]), hex_id(r["spanId"]), attributes(r)) for r in records]
    assert [(t, s, a["gen_ai.evaluation.name"]) for t, s, a in seen] == [
        (where.trace_id, root, "parameter_correctness"),
        (where.trace_id, lookup, "parameter_correctness"),
        (where.trace_id, root, "agent_reliability"),
    ]
    on_trace, on_call, on_session = (a for _, _, a in seen)
    assert on_trace["gen_ai.evaluation.score.value"] == 1.0
    assert on_trace["gen_ai.evaluation.score.label"] == "pass"
    assert on_trace["gen_ai.evaluation.explanation"] == "1 calls checked, 0 with schema errors"
    assert (on_call["agenteval.evaluation.scope"], on_call["gen_ai.evaluation.score.value"]) == (
        "tool_call",
        1.0,
    )
    assert (on_session["agenteval.evaluation.scope"], on_session["agenteval.status"]) == (
        "session",
        "ok",
    )
    assert on_session["gen_ai.evaluation.score.label"] == "fail"


def test_a_backend_without_logs_gets_the_scores_as_span_events(
    otlp_receiver: OTLPReceiver,
) -> None:
    otlp_receiver.logs_status = 404  # Jaeger, Langfuse: traces only
    trace = sample_trace()
    exporter = OTelExporter(endpoint=otlp_receiver.url)
    note = exporter.preflight()
    assert note == (
        f"{otlp_receiver.base_url}/v1/logs takes no logs (HTTP 404): scores go as span events "
        "on the spans they evaluate instead"
    )
    assert exporter.preflight() is None  # checked once
    exporter.export(trace, [ParameterCorrectness().measure(trace.model_copy())])
    exporter.shutdown()
    assert exporter.failed == 0 and otlp_receiver.log_records() == []
    [root] = [s for s in otlp_receiver.spans() if "parentSpanId" not in s]
    [event] = [e for e in root["events"] if e["name"] == "gen_ai.evaluation.result"]
    # inside the span it evaluates: stamped at the span's end, not after it
    assert int(event["timeUnixNano"]) == int(root["endTimeUnixNano"])


def test_exporting_a_trace_again_gives_the_same_ids() -> None:
    trace = sample_trace()
    first, again = OTelExporter(TracerProvider()), OTelExporter(TracerProvider())
    one, two = first.export(trace), again.export(trace)
    assert one == two
    trace_id, root_id = otel_ids(trace.id, trace.spans[0].id)
    assert (one.trace_id, one.span_ids[trace.spans[0].id]) == (
        f"{trace_id:032x}",
        f"{root_id:016x}",
    )
    assert len(set(one.span_ids.values())) == len(trace.spans)
    other = sample_trace()  # another run: other ids
    assert OTelExporter(TracerProvider()).export(other).trace_id != one.trace_id
    # what reaches the backend carries them
    spans = exported(trace)
    assert {f"{s.context.trace_id:032x}" for s in spans} == {one.trace_id}
    assert sorted(f"{s.context.span_id:016x}" for s in spans) == sorted(one.span_ids.values())


def test_every_root_shows_the_runs_input_and_every_span_its_conversation() -> None:
    # a crew's root span holds no input of its own; the run's input is the task
    crew = Span(id="c", kind=SpanKind.AGENT, name="crew", start_time=1.0, end_time=4.0)
    agent = Span(id="a", parent_id="c", kind=SpanKind.AGENT, name="support", start_time=2.0)
    agent.end_time = 3.0
    llm = Span(id="l", parent_id="a", kind=SpanKind.LLM, name="m", start_time=2.1, end_time=2.9)
    trace = Trace(
        id="t-crew",
        session_id="sess-h",
        input="Refund order A-1",
        output="Refunded.",
        spans=[crew, agent, llm],
    )
    spans = by_name(exported(trace))
    root = spans["invoke_workflow crew"].attributes
    assert (root["input.value"], root["output.value"]) == ("Refund order A-1", "Refunded.")
    assert {s.attributes["gen_ai.conversation.id"] for s in spans.values()} == {"sess-h"}
    assert {s.attributes["session.id"] for s in spans.values()} == {"sess-h"}
    # a model call leaves the process: CLIENT; agents and workflows run in it: INTERNAL
    assert spans["chat m"].kind is OTelSpanKind.CLIENT
    assert spans["invoke_agent support"].kind is OTelSpanKind.INTERNAL
    # the root's own input stays None on the way back
    [back] = import_otlp(otlp_json(list(spans.values())))
    assert back == trace and back.spans[0].input is None


class _Silent:
    """A server that takes requests and answers none until it is closed: a backend that
    hangs. Closing answers every waiting request (200), so no exporter retries later."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1/traces"
        self.waiting: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.waiting.append(connection)

    def close(self) -> None:
        self.listener.close()
        for connection in self.waiting:
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            connection.close()


def test_close_honours_its_deadline_when_the_backend_hangs(tmp_path: Path) -> None:
    silent = _Silent()
    try:
        exporter = OTelExporter(endpoint=silent.url, timeout=60, score_events="none")
        exporter.export(sample_trace())
        with pytest.raises(ExportError, match=r"^still sending after 0.5 s$"):
            exporter.shutdown(timeout=0.5)  # not the 60 s the request could take
        # an online evaluator's close deadline reaches its OpenTelemetry sink
        sink = OTelSink(endpoint=silent.url, timeout=60, score_events="none")
        with OnlineEvaluator(capture=None, sinks=[sink], log=False) as evaluator:
            evaluator.submit(sample_trace())
            assert evaluator.flush(30)
            evaluator.close(timeout=1)
        assert sink.problem is not None and sink.problem.startswith("still sending after")
    finally:
        silent.close()


def test_unreachable_phoenix_is_one_line_for_any_number_of_traces() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{probe.getsockname()[1]}"
    annotations = PhoenixAnnotations(down)
    annotations.log_failures = False
    result = MetricResult(name="coherence", version="1", score=1.0, threshold=0.5, success=True)
    for _ in range(5):
        trace = sample_trace()
        annotations.add_trace(trace, OTelExporter(TracerProvider()).export(trace), [result])
    [problem] = annotations.flush(30)
    assert problem.startswith(f"Phoenix annotations: {down}/v1/span_annotations: ConnectError")
    assert problem.endswith("(and 4 more batch(es) failed)")
    annotations.close()


def test_a_retrieval_shows_its_documents_and_a_completion_its_operation(tmp_path: Path) -> None:
    # Phoenix lists a retriever span's documents from retrieval.documents.*: the documents
    # were only in output.value; and a completion was exported as "chat {model}"
    from agenteval_langchain import AgentEvalCallbackHandler
    from agenteval_llamaindex import instrument
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from llamaindex_models import CompletionModel, orders_index

    class Orders(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            return [Document("Order A-1 shipped on Monday.", id="d1", metadata={"page": 3})]

    with OnlineEvaluator(capture=tmp_path / "capture.jsonl", log=False) as evaluator:
        Orders().invoke("When did A-1 ship?", {"callbacks": [AgentEvalCallbackHandler(evaluator)]})
        engine = orders_index().as_query_engine(llm=CompletionModel())
        instrumentation = instrument(evaluator)
        try:
            engine.query("When did A-1 ship?")
        finally:
            instrumentation.uninstrument()
        langchain, llamaindex = evaluator.captured()
    found = by_name(exported(langchain))["retrieval Orders"].attributes
    assert {k: v for k, v in found.items() if k.startswith("retrieval.")} == {
        "retrieval.documents.0.document.content": "Order A-1 shipped on Monday.",
        "retrieval.documents.0.document.id": "d1",
        "retrieval.documents.0.document.metadata": '{"page": 3}',
    }
    spans = by_name(exported(llamaindex))
    retrieval = spans["retrieval VectorIndexRetriever.retrieve"].attributes
    assert retrieval["openinference.span.kind"] == "RETRIEVER"
    assert retrieval["retrieval.documents.0.document.content"] == "Order A-1 shipped on Monday."
    assert retrieval["retrieval.documents.0.document.score"] == pytest.approx(1.0)
    completion = spans["text_completion instruct-1"].attributes
    assert completion["gen_ai.operation.name"] == "text_completion"


def test_a_model_calls_images_and_content_blocks_are_exported_as_parts(tmp_path: Path) -> None:
    # content blocks were exported as one text part holding their JSON, data and all;
    # Phoenix shows a message's images from OpenInference's message.contents
    photo = "data:image/png;base64,iVBORw0KGgo="
    sent = [
        {
            "role": "human",
            "content": [
                {"type": "text", "text": "Which city is this?"},
                {"type": "image_url", "image_url": {"url": photo}},
                {"type": "image", "url": "https://example.com/map.png"},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
            ],
        },
        {
            "role": "ai",
            "content": [
                {"type": "thinking", "thinking": "A river and a tower."},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "c1", "name": "lookup", "input": {"city": "Paris"}},
            ],
            "tool_calls": [{"name": "lookup", "args": {"city": "Paris"}, "id": "c1"}],
        },
    ]
    model_call = Span(
        kind=SpanKind.LLM, name="m-1", input=[sent], output="Paris.", start_time=1.0, end_time=2.0
    )
    trace = Trace(input="Which city is this?", output="Paris.", spans=[model_call])
    llm = by_name(exported(trace))["chat m-1"].attributes
    assert json.loads(llm["gen_ai.input.messages"]) == [
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "Which city is this?"},
                {
                    "type": "blob",
                    "modality": "image",
                    "mime_type": "image/png",
                    "content": "iVBORw0KGgo=",
                },
                {"type": "uri", "modality": "image", "uri": "https://example.com/map.png"},
                {
                    "type": "blob",
                    "modality": "audio",
                    "mime_type": "audio/wav",
                    "content": "UklGRg==",
                },
            ],
        },
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "A river and a tower."},
                {"type": "text", "content": "Checking."},
                {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"city": "Paris"}},
            ],
        },
    ]
    contents = {k: v for k, v in llm.items() if ".contents." in k}
    assert contents == {
        "llm.input_messages.0.message.contents.0.message_content.type": "text",
        "llm.input_messages.0.message.contents.0.message_content.text": "Which city is this?",
        "llm.input_messages.0.message.contents.1.message_content.type": "image",
        "llm.input_messages.0.message.contents.1.message_content.image.image.url": photo,
        "llm.input_messages.0.message.contents.2.message_content.type": "image",
        "llm.input_messages.0.message.contents.2.message_content.image.image.url": "https://example.com/map.png",
    }
    assert llm["llm.input_messages.1.message.content"] == "Checking."
    path = tmp_path / "otlp.json"
    path.write_text(json.dumps(otlp_json(exported(trace))))
    [back] = import_otlp(path)
    assert back == trace


def test_a_models_reasoning_is_exported_as_a_reasoning_part() -> None:
    model_call = Span(
        kind=SpanKind.LLM,
        name="m-1",
        input="Where is A-1?",
        output="It shipped.",
        attributes={REASONING: "The lookup said shipped."},
    )
    llm = by_name(exported(Trace(input="Where is A-1?", spans=[model_call])))["chat m-1"]
    assert json.loads(llm.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "The lookup said shipped."},
                {"type": "text", "content": "It shipped."},
            ],
            "finish_reason": "stop",
        }
    ]
