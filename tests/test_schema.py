"""The trace schema: seed constructors, derived views, versioned lossless JSON."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agenteval_core import (
    SCHEMA_VERSION,
    AgentStep,
    EvalCase,
    ExpectedToolCall,
    Span,
    SpanKind,
    ToolCall,
    ToolSpec,
    Trace,
)


def seed_case() -> EvalCase:
    return EvalCase(
        input="Search for recent AI papers and write a summary",
        agent_trace=[
            AgentStep(
                thought="I need to search for recent papers first",
                tool_calls=[
                    ToolCall(
                        name="search",
                        arguments={"query": "AI papers 2025"},
                        result=["Paper A", "Paper B", "Paper C"],
                    )
                ],
            ),
            AgentStep(
                thought="Now I'll summarize what I found",
                tool_calls=[ToolCall(name="summarize")],
                output="Here are the key AI papers from 2025...",
            ),
        ],
        expected_tool_calls=["search", "summarize"],
    )


def test_seed_constructor_builds_a_trace() -> None:
    case = seed_case()
    assert case.trace is not None
    assert [call.name for call in case.tool_calls] == ["search", "summarize"]
    assert case.tool_calls[0].arguments == {"query": "AI papers 2025"}
    assert case.actual_output == "Here are the key AI papers from 2025..."
    assert case.trace.output == case.actual_output
    assert case.expected_tool_calls == [
        ExpectedToolCall(name="search"),
        ExpectedToolCall(name="summarize"),
    ]
    kinds = [span.kind for span in case.trace.spans]
    assert kinds == [SpanKind.AGENT, SpanKind.LLM, SpanKind.TOOL, SpanKind.LLM, SpanKind.TOOL]
    root = case.trace.spans[0]
    assert all(span.parent_id == root.id for span in case.trace.spans[1:])


def test_steps_round_trip_through_the_trace() -> None:
    case = seed_case()
    assert case.steps == [
        AgentStep(
            thought="I need to search for recent papers first",
            tool_calls=[
                ToolCall(
                    name="search",
                    arguments={"query": "AI papers 2025"},
                    result=["Paper A", "Paper B", "Paper C"],
                )
            ],
        ),
        AgentStep(
            thought="Now I'll summarize what I found",
            tool_calls=[ToolCall(name="summarize")],
            output="Here are the key AI papers from 2025...",
        ),
    ]


def test_json_round_trip_is_lossless() -> None:
    trace = seed_case().trace
    assert trace is not None
    trace.tools = [ToolSpec(name="search", description="web", parameters={"type": "object"})]
    trace.spans[1].attributes = {"gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 3}
    text = trace.model_dump_json()
    assert f'"schema_version":{SCHEMA_VERSION}' in text
    assert Trace.model_validate_json(text) == trace
    assert trace.token_usage() == {"input_tokens": 12, "output_tokens": 3}


def test_newer_schema_version_is_refused_with_a_clear_message() -> None:
    with pytest.raises(ValidationError, match="newer than this agenteval understands"):
        Trace.model_validate({"schema_version": SCHEMA_VERSION + 1})


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(ValidationError, match="spam"):
        Trace.model_validate({"spam": 1})


def test_failed_tool_call_heuristics() -> None:
    assert ToolCall(name="t", error="boom").failed
    assert ToolCall(name="t", result={"error": "not found"}).failed
    assert ToolCall(name="t", result="Error: 404").failed
    assert not ToolCall(name="t", result="ok").failed


def test_case_from_trace_and_schemas() -> None:
    trace = Trace(
        input="q",
        output="a",
        tools=[ToolSpec(name="get", parameters={"type": "object", "required": ["id"]})],
        spans=[Span(kind=SpanKind.TOOL, name="get", tool_call=ToolCall(name="get"))],
    )
    case = EvalCase.from_trace(trace, reference_arguments={"get": {"id": 1}})
    assert case.input == "q" and case.actual_output == "a"
    assert case.schema_for("get") == {"type": "object", "required": ["id"]}
    assert case.schema_for("missing") is None
    assert case.reference_for(ExpectedToolCall(name="get")) == {"id": 1}
    assert case.reference_for(ExpectedToolCall(name="get", arguments={"id": 2})) == {"id": 2}
