"""The trace schema: seed constructors, derived views, versioned lossless JSON; metric
results."""

from __future__ import annotations

import json
import math
import os
import random
import re
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from agenteval_core import (
    AGENT_NAME,
    INTERNAL_CALL,
    REFUSAL,
    SCHEMA_VERSION,
    AgentStep,
    EvalCase,
    ExpectedToolCall,
    Metric,
    MetricKind,
    MetricResult,
    RunStatus,
    Score,
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


def test_a_failed_model_call_and_the_frameworks_own_calls_are_no_steps() -> None:
    # a retried call failed first; a guardrail's check (its own LLM and tool calls inside)
    # ran between the agent's turns; the run then failed at its last model call
    lookup = ToolCall(id="c1", name="lookup", arguments={"id": "A-1"}, result="shipped")
    check = ToolCall(id="g1", name="policy", arguments={}, result="ok")
    spans = [
        Span(id="root", kind=SpanKind.AGENT, name="agent"),
        Span(id="m1", parent_id="root", kind=SpanKind.LLM, name="m", error="RuntimeError: 529"),
        Span(id="m2", parent_id="root", kind=SpanKind.LLM, name="m", output="", thought="look"),
        Span(id="t1", parent_id="root", kind=SpanKind.TOOL, name="lookup", tool_call=lookup),
        Span(
            id="g",
            parent_id="root",
            kind=SpanKind.CHAIN,
            name="guardrail",
            attributes={INTERNAL_CALL: True},
        ),
        Span(id="g-llm", parent_id="g", kind=SpanKind.LLM, name="judge", output="valid"),
        Span(id="g-tool", parent_id="g-llm", kind=SpanKind.TOOL, name="policy", tool_call=check),
        Span(id="m3", parent_id="root", kind=SpanKind.LLM, name="m", output="A-1 shipped."),
        Span(id="m4", parent_id="root", kind=SpanKind.LLM, name="m", error="RuntimeError: 500"),
    ]
    trace = Trace(input="Where is A-1?", spans=spans)
    assert trace.steps() == [
        AgentStep(thought="look", tool_calls=[lookup]),
        AgentStep(output="A-1 shipped."),
    ]
    assert trace.tool_calls() == [lookup, check]  # every call that ran, as before


def test_a_tool_call_joins_the_step_that_asked_for_it() -> None:
    # two sub-agents at once: B's model asked after A's, and B's call ran first; a call no
    # model asked for by id (a ReAct call without one) joins the open step
    a1 = ToolCall(id="a1", name="lookup", arguments={"id": "A-1"}, result="shipped")
    b1 = ToolCall(id="b1", name="lookup", arguments={"id": "B-2"}, result="delayed")
    plain = ToolCall(name="note", arguments={}, result="ok")
    spans = [
        Span(id="root", kind=SpanKind.AGENT, name="graph"),
        Span(id="a", parent_id="root", kind=SpanKind.AGENT, name="checker"),
        Span(id="b", parent_id="root", kind=SpanKind.AGENT, name="checker"),
        Span(id="am", parent_id="a", kind=SpanKind.LLM, name="m", requested_tool_calls=[a1]),
        Span(id="bm", parent_id="b", kind=SpanKind.LLM, name="m", requested_tool_calls=[b1]),
        Span(id="bt", parent_id="b", kind=SpanKind.TOOL, name="lookup", tool_call=b1),
        Span(id="at", parent_id="a", kind=SpanKind.TOOL, name="lookup", tool_call=a1),
        Span(id="nt", parent_id="b", kind=SpanKind.TOOL, name="note", tool_call=plain),
        Span(id="am2", parent_id="a", kind=SpanKind.LLM, name="m", output="shipped"),
    ]
    trace = Trace(input="Check A-1 and B-2", spans=spans)
    assert trace.steps() == [
        AgentStep(tool_calls=[a1]),
        AgentStep(tool_calls=[b1, plain]),
        AgentStep(output="shipped"),
    ]


def test_a_tools_own_model_calls_are_no_steps_but_an_agent_inside_a_tool_has_steps() -> None:
    # a tool that asks a model (a summariser, a query engine's answer) does its work inside
    # its span: that call was a step of the agent. A coworker a manager delegated to through
    # a tool is an agent of the run: its steps are the run's
    summarise = ToolCall(id="c1", name="summarise", arguments={"id": "A-1"}, result="left")
    delegate = ToolCall(id="c2", name="delegate", arguments={"to": "support"}, result="shipped")
    lookup = ToolCall(id="w1", name="lookup", arguments={"id": "A-1"}, result="shipped")
    inner = ToolCall(id="x1", name="fetch", arguments={}, result="raw history")
    spans = [
        Span(id="root", kind=SpanKind.AGENT, name="manager"),
        Span(id="m1", parent_id="root", kind=SpanKind.LLM, name="m", output=""),
        Span(id="t1", parent_id="root", kind=SpanKind.TOOL, name="summarise", tool_call=summarise),
        Span(id="t1-chain", parent_id="t1", kind=SpanKind.CHAIN, name="pipeline"),
        Span(id="t1-llm", parent_id="t1-chain", kind=SpanKind.LLM, name="s", output="left"),
        Span(id="t1-tool", parent_id="t1", kind=SpanKind.TOOL, name="fetch", tool_call=inner),
        Span(id="m2", parent_id="root", kind=SpanKind.LLM, name="m", output=""),
        Span(id="t2", parent_id="root", kind=SpanKind.TOOL, name="delegate", tool_call=delegate),
        Span(id="w", parent_id="t2", kind=SpanKind.AGENT, name="support"),
        Span(id="w-llm", parent_id="w", kind=SpanKind.LLM, name="w", output="", thought="look"),
        Span(id="w-tool", parent_id="w", kind=SpanKind.TOOL, name="lookup", tool_call=lookup),
        Span(id="w-llm2", parent_id="w", kind=SpanKind.LLM, name="w", output="shipped"),
        Span(id="m3", parent_id="root", kind=SpanKind.LLM, name="m", output="A-1 shipped."),
    ]
    trace = Trace(input="Where is A-1?", spans=spans)
    assert trace.steps() == [
        AgentStep(tool_calls=[summarise]),
        AgentStep(tool_calls=[delegate]),
        AgentStep(thought="look", tool_calls=[lookup]),
        AgentStep(output="shipped"),
        AgentStep(output="A-1 shipped."),
    ]
    assert trace.final_model_call() is spans[-1]
    assert trace.tool_calls() == [summarise, inner, delegate, lookup]  # every call that ran


def test_the_refusal_a_run_ended_on_is_its_last_own_model_calls() -> None:
    def run(*last: Span) -> Trace:
        refused = Span(id="m1", kind=SpanKind.LLM, name="m", output="", attributes={REFUSAL: ""})
        return Trace(
            input="q", spans=[Span(id="root", kind=SpanKind.AGENT, name="a"), refused, *last]
        )

    assert run().refusal() == ""
    # a check the framework ran after it, or a failed retry, is not the run's last answer
    check = Span(id="g", kind=SpanKind.CHAIN, name="check", attributes={INTERNAL_CALL: True})
    judged = Span(id="g1", parent_id="g", kind=SpanKind.LLM, name="judge", output="ok")
    failed = Span(id="m2", kind=SpanKind.LLM, name="m", error="RuntimeError: 500")
    assert run(check, judged, failed).refusal() == ""
    # a later answer is
    assert run(Span(id="m3", kind=SpanKind.LLM, name="m", output="Here.")).refusal() is None


def test_a_run_that_failed_at_its_models_refusal_raised_that_refusal() -> None:
    def run(*last: Span, status: RunStatus | None = RunStatus.ERROR) -> Trace:
        refused = Span(id="m1", kind=SpanKind.LLM, name="m", attributes={REFUSAL: "No."})
        spans = [Span(id="root", kind=SpanKind.AGENT, name="a"), refused, *last]
        return Trace(input="q", spans=spans, status=status, error="ModelRefusalError: No.")

    assert run().raised_refusal() == "No."
    assert run(status=None).raised_refusal() == "No."  # an unrecorded status, an error
    # a node that failed after it, not a model or tool call, failed at the refusal
    assert run(Span(id="n", kind=SpanKind.CHAIN, name="n", error="E")).raised_refusal() == "No."
    # a run that went on after it failed elsewhere: a tool, a failed retry of the model
    tool = Span(id="t", kind=SpanKind.TOOL, name="book", error="ValueError: full")
    failed = Span(id="m2", kind=SpanKind.LLM, name="m", error="RuntimeError: 500")
    assert run(tool).raised_refusal() is None
    assert run(failed).raised_refusal() is None
    # the refusal returned as the answer, and a run stopped by the guard, raised none
    assert run(status=RunStatus.OK).refusal() == "No."
    assert run(status=RunStatus.OK).raised_refusal() is None
    assert run(status=RunStatus.STOPPED).raised_refusal() is None


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


# --- metric results built without validation ----------------------------------------------

_ANY_TEXT = st.one_of(st.none(), st.text(max_size=5), st.integers(0, 3), st.just(True))
_ODD_NUMBER = st.one_of(
    st.none(),
    st.integers(-3, 10**6),
    st.booleans(),
    st.floats(allow_nan=False),
    st.text(max_size=2),
)
# what a metric may put in each Score field (and the trace id it comes with): the usual
# value first, then anything, so a draw can make any one field odd and the rest usual
_USUAL: dict[str, Any] = {
    "reason": "a reason",
    "metadata": {"gap": 0.25},
    "error": None,
    "skipped": False,
    "judge_model": None,
    "input_tokens": None,
    "output_tokens": None,
    "cost_usd": None,
    "trace_id": "t1",
}
_ODD: dict[str, st.SearchStrategy[Any]] = {
    "reason": st.one_of(st.text(max_size=5), st.none(), st.integers(0, 3)),
    "metadata": st.one_of(
        st.dictionaries(st.text(max_size=3), st.one_of(st.integers(), st.text(max_size=3))),
        st.dictionaries(st.integers(0, 3), st.integers(), min_size=1),
        st.just([("a", 1)]),
        st.none(),
    ),
    "error": _ANY_TEXT,
    "skipped": st.one_of(st.booleans(), st.integers(0, 1)),
    "judge_model": _ANY_TEXT,
    "input_tokens": _ODD_NUMBER,
    "output_tokens": _ODD_NUMBER,
    "cost_usd": _ODD_NUMBER,
    "trace_id": _ANY_TEXT,
}


class _Fixed(Metric):
    name = "fixed_for_test"
    kind = MetricKind.DETERMINISTIC

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        raise NotImplementedError


@settings(max_examples=500)
@given(
    value=st.one_of(st.none(), st.floats(), st.integers(-2, 2)),
    odd=st.dictionaries(st.sampled_from(sorted(_ODD)), st.none(), max_size=3).flatmap(
        lambda chosen: st.fixed_dictionaries({name: _ODD[name] for name in chosen})
    ),
)
def test_a_metric_result_equals_its_validated_form(
    value: float | None, odd: dict[str, Any]
) -> None:
    """Results are built without validation when it could change nothing; whatever a
    metric returns, the result is the one validation gives (or validation's error)."""
    given = {**_USUAL, **odd}
    score = Score(
        value,
        given["reason"],
        given["metadata"],
        given["skipped"],
        given["error"],
        given["judge_model"],
        None,
        given["input_tokens"],
        given["output_tokens"],
        given["cost_usd"],
    )
    clamped = None if value is None else min(1.0, max(0.0, float(value)))
    failure = value is not None and not math.isfinite(value)
    message = f"metric produced a non-finite score {value!r}"
    fields = {
        "name": "fixed_for_test",
        "version": "1",
        "score": None if failure else clamped,
        "threshold": 0.5,
        "success": None if failure or clamped is None else clamped >= 0.5 - 1e-9,
        "reason": message if failure else given["reason"] or (given["error"] or ""),
        "metadata": {"error_kind": "metric_error"} if failure else given["metadata"],
        "error": message if failure else given["error"],
        "skipped": False if failure else given["skipped"],
        "trace_id": given["trace_id"],
        "session_id": "s1",
        "case_id": None,
        "judge_model": None if failure else given["judge_model"],
        "prompt_version": None,
        "input_tokens": None if failure else given["input_tokens"],
        "output_tokens": None if failure else given["output_tokens"],
        "cost_usd": None if failure else given["cost_usd"],
        "latency_ms": 2.5,
    }

    def build() -> MetricResult:
        return _Fixed()._result(
            score, 2.5, trace_id=given["trace_id"], session_id="s1", case_id=None
        )

    try:
        expected = MetricResult(**fields)
    except ValidationError as exc:
        with pytest.raises(ValidationError) as raised:
            build()
        assert raised.value.errors() == exc.errors()
        return
    result = build()
    assert result == expected
    # == takes True for 1 and 1 for 1.0: the values' types must match too
    assert {k: type(v) for k, v in result.__dict__.items()} == {
        k: type(v) for k, v in expected.__dict__.items()
    }
    assert result.model_dump_json() == expected.model_dump_json()
    assert result.model_fields_set == expected.model_fields_set
    assert result.metadata is not given["metadata"]  # its own copy, as validation makes


def test_an_unvalidated_result_needs_every_field_in_order() -> None:
    from agenteval_core.schema._results import unvalidated_result

    fields = MetricResult(name="m", version="1", score=None, threshold=0.5, success=None)
    values = dict(reversed(list(fields.__dict__.items())))
    with pytest.raises(ValueError, match="fields, in order, are"):
        unvalidated_result(values)


@pytest.mark.parametrize(
    ("question", "answer"),
    [("Where is my order?", "It ships today."), ({"messages": ["hi"]}, None), (None, 42)],
)
def test_a_case_made_from_a_trace_equals_the_validated_case(question: Any, answer: Any) -> None:
    # the engine builds every trace's case without validating it: it must be the same case
    trace = Trace.from_steps(question, [], output=answer, session_id="s1")
    validated = EvalCase(id=trace.id, trace=trace, input=trace.input, actual_output=trace.output)
    case = EvalCase.of(trace)
    assert case == validated
    assert case.__dict__ == validated.__dict__
    assert list(case.__dict__) == list(validated.__dict__)  # the same fields in the same order
    assert (
        case.model_fields_set
        == validated.model_fields_set
        == {"id", "trace", "input", "actual_output"}
    )
    assert case.model_dump_json() == validated.model_dump_json()
    assert case.trace is trace and case.id == trace.id
    assert case.metadata == {} and case.metadata is not EvalCase.of(trace).metadata


def _model_cases() -> list[tuple[type[BaseModel], dict[str, Any]]]:
    # what a session's history keeps of a trace
    return [
        (Trace, {"output": "It ships today.", "id": "t1", "session_id": "s1"}),
        (Trace, {"output": {"answer": [1, 2]}, "id": "t2", "session_id": None}),
    ]


@pytest.mark.parametrize(("model", "given"), _model_cases())
def test_a_model_built_without_validation_equals_the_validated_one(
    model: type[BaseModel], given: dict[str, Any]
) -> None:
    from agenteval_core.schema._unvalidated import unvalidated_with_defaults

    validated = model(**given)
    built = unvalidated_with_defaults(model, given)
    assert built == validated
    assert list(built.__dict__) == list(validated.__dict__)
    assert built.model_fields_set == set(given)
    # a trace's validator marks the schema version it read as set; nothing reads that mark
    assert validated.model_fields_set - {"schema_version"} == set(given)
    assert built.model_dump_json() == validated.model_dump_json()
    # a default factory's value is made for each model, never shared
    again = unvalidated_with_defaults(model, given)
    for name, field in model.model_fields.items():
        if field.default_factory is not None and name not in given:
            assert getattr(built, name) is not getattr(again, name)


def test_ids_stay_unique_when_the_program_seeds_random_or_forks() -> None:
    # ids come from a private generator seeded by the OS: a program's random.seed (common in
    # evaluation code) must not make them repeat, nor two forked workers share a sequence
    random.seed(7)
    first = Trace(input="q").id
    random.seed(7)
    second = Trace(input="q").id
    assert first != second
    assert re.fullmatch("[0-9a-f]{32}", first)
    if not hasattr(os, "fork"):
        return
    children = []
    for _ in range(2):
        reading, writing = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: three ids, then out without running the parent's cleanup
            os.write(writing, " ".join(Trace(input="q").id for _ in range(3)).encode())
            os._exit(0)
        os.close(writing)
        with os.fdopen(reading) as pipe:
            children.append(pipe.read().split())
        os.waitpid(pid, 0)
    parents = [Trace(input="q").id for _ in range(3)]
    every = [*children[0], *children[1], *parents]
    assert len(every) == len(set(every)) == 9


def _conversation_run(calls: int) -> Trace:
    """A run as an agent makes it: each model call is sent the conversation so far (as
    equal copies, the way a framework's messages are converted anew at each call)."""
    said: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "human", "content": "Read the manual."},
    ]
    spans = []
    for number in range(calls):
        sent = [dict(message) for message in said]
        spans.append(Span(id=f"m{number}", kind=SpanKind.LLM, name="gpt", input=[sent]))
        call = ToolCall(id=f"c{number}", name="read_page", arguments={"page": number})
        call.result = f"page {number}: " + "lorem ipsum " * 100
        spans.append(Span(id=f"t{number}", kind=SpanKind.TOOL, name="read_page", tool_call=call))
        said += [
            {"role": "ai", "content": "", "tool_calls": [{"name": "read_page", "id": call.id}]},
            {"role": "tool", "content": call.result},
        ]
    return Trace(spans=spans)


def test_a_conversation_resent_to_each_model_call_is_written_once() -> None:
    # each model call is sent every earlier message again: a line held 300 tool results
    # 45,000 times (119 MB for one run); now each message once, the rest by reference
    trace = _conversation_run(4)
    line = json.loads(trace.to_json())
    written = [
        (span["input"], span["attributes"].get("agenteval.input.shared"))
        for span in line["spans"]
        if span["kind"] == "llm"
    ]
    whole = [span.input[0] for span in trace.spans if span.kind is SpanKind.LLM]
    assert written == [
        ([whole[0]], None),
        ([whole[1][2:]], {"span": "m0", "messages": 2}),
        ([whole[2][4:]], {"span": "m1", "messages": 4}),
        ([whole[3][6:]], {"span": "m2", "messages": 6}),
    ]
    read = Trace.model_validate_json(trace.to_json())
    assert read == trace
    assert Trace.model_validate(trace.to_jsonable()) == trace
    # read back, the calls hold the shared messages once: the same objects
    first, last = read.spans[0].input[0], read.spans[6].input[0]
    assert all(a is b for a, b in zip(first, last[:2], strict=False))
    # the line grows with the run, not with its square
    sizes = [len(_conversation_run(calls).to_json()) for calls in (10, 20, 40)]
    assert sizes[2] - sizes[1] < 2.2 * (sizes[1] - sizes[0])


def test_a_flat_conversation_and_a_branching_one_round_trip() -> None:
    # LlamaIndex and CrewAI send a flat list of messages; two agents of one run share
    # only their first messages, and each call is matched with the one it shares most with
    system = {"role": "system", "content": "Be brief."}
    asked = {"role": "user", "content": "Plan a trip."}
    planner = [system, asked, {"role": "assistant", "content": "Plan: fly."}]
    booker = [system, asked, {"role": "assistant", "content": "Booking."}]
    spans = [
        Span(id="p1", kind=SpanKind.LLM, name="m", input=[dict(m) for m in planner[:2]]),
        Span(id="b1", kind=SpanKind.LLM, name="m", input=[dict(m) for m in booker[:2]]),
        Span(id="p2", kind=SpanKind.LLM, name="m", input=[dict(m) for m in planner]),
        Span(id="b2", kind=SpanKind.LLM, name="m", input=[dict(m) for m in booker]),
        Span(id="x", kind=SpanKind.LLM, name="m", input=[{"role": "user", "content": "Hi"}]),
    ]
    trace = Trace(spans=spans)
    line = json.loads(trace.to_json())
    assert [(s["input"], s["attributes"]) for s in line["spans"]] == [
        (planner[:2], {}),
        ([], {"agenteval.input.shared": {"span": "p1", "messages": 2}}),
        ([planner[2]], {"agenteval.input.shared": {"span": "b1", "messages": 2}}),
        ([booker[2]], {"agenteval.input.shared": {"span": "p2", "messages": 2}}),
        ([{"role": "user", "content": "Hi"}], {}),
    ]
    assert Trace.model_validate_json(trace.to_json()) == trace
    # spans of one id (a trace built by hand) leave a reference ambiguous: none is written
    twins = Trace(spans=[span.model_copy(update={"id": "same"}) for span in spans])
    assert "agenteval.input.shared" not in twins.to_json()
    assert Trace.model_validate_json(twins.to_json()) == twins


def test_a_shared_input_that_cannot_be_resolved_is_kept_as_written() -> None:
    reference = {"agenteval.input.shared": {"span": "gone", "messages": 2}}
    too_many = {"agenteval.input.shared": {"span": "m0", "messages": 5}}
    line = {
        "spans": [
            {"id": "m0", "kind": "llm", "name": "m", "input": [[{"role": "user"}]]},
            {"id": "m1", "kind": "llm", "name": "m", "input": [[]], "attributes": reference},
            {"id": "m2", "kind": "llm", "name": "m", "input": [[]], "attributes": too_many},
        ]
    }
    read = Trace.model_validate(line)
    assert [(s.input, s.attributes) for s in read.spans[1:]] == [
        ([[]], reference),
        ([[]], too_many),
    ]


def test_version_2_lines_with_every_copy_read_as_before() -> None:
    trace = _conversation_run(3)
    old = trace.model_dump(mode="json")  # every message in every call, as version 2 wrote
    old["schema_version"] = 2
    read = Trace.model_validate(old)
    assert read == trace and read.schema_version == SCHEMA_VERSION


_MESSAGES = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "ai", "tool"]), "content": st.text(max_size=5)}
)


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.lists(_MESSAGES, max_size=3), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_any_sequence_of_conversations_round_trips(
    calls: list[tuple[int, list[dict[str, Any]], bool]],
) -> None:
    # each call keeps a prefix of the call before (any length, even past its end) and adds
    # messages; wrapped as LangChain sends them or flat
    spans: list[Span] = []
    said: list[dict[str, Any]] = []
    for number, (kept, added, wrapped) in enumerate(calls):
        said = [dict(m) for m in said[:kept]] + added
        sent: list[Any] = [list(said)] if wrapped else list(said)
        spans.append(Span(id=f"s{number}", kind=SpanKind.LLM, name="m", input=sent))
    trace = Trace(spans=spans)
    assert Trace.model_validate_json(trace.to_json()) == trace
    assert Trace.model_validate(trace.to_jsonable()) == trace


def test_a_call_its_framework_ran_again_is_one_call_its_last_run() -> None:
    def tool(span_id: str, call_id: str | None, error: str | None = None, **arguments: Any) -> Span:
        result = None if error else f"ran {span_id}"
        call = ToolCall(id=call_id, name="lookup", arguments=arguments, result=result, error=error)
        return Span(id=span_id, kind=SpanKind.TOOL, name="lookup", tool_call=call)

    def model(span_id: str, *asked: ToolCall) -> Span:
        return Span(id=span_id, kind=SpanKind.LLM, name="llm", requested_tool_calls=list(asked))

    asked = ToolCall(id="c1", name="lookup", arguments={"order_id": "A-1"})
    trace = Trace(
        input="Where is A-1?",
        spans=[
            model("m1", asked),
            tool("t1", "c1", "ConnectionError: timed out", order_id="A-1"),
            tool("t2", "c1", "ConnectionError: timed out", order_id="A-1"),  # a retry
            tool("t3", "c1", order_id="A-1"),  # a retry that worked
            tool("t4", "c1", order_id="B-2"),  # other arguments: a call of its own
            tool("t5", None, order_id="A-1"),  # no id: never taken for a retry
            tool("t6", None, order_id="A-1"),
            model("m2", asked),  # the model asks again under the same id
            tool("t7", "c1", order_id="A-1"),
            model("m3"),
        ],
    )
    assert [c.result for c in trace.tool_calls()] == [
        "ran t3",
        "ran t4",
        "ran t5",
        "ran t6",
        "ran t7",
    ]
    assert [c.result or c.error for c in trace.tool_calls(every_run=True)] == [
        "ConnectionError: timed out",
        "ConnectionError: timed out",
        "ran t3",
        "ran t4",
        "ran t5",
        "ran t6",
        "ran t7",
    ]
    assert [[c.result for c in step.tool_calls] for step in trace.steps()] == [
        ["ran t3", "ran t4", "ran t5", "ran t6"],
        ["ran t7"],
        [],
    ]


def test_another_agents_model_call_beside_a_retry_leaves_it_one_call() -> None:
    # two agents at once (CrewAI's async_execution tasks): the refunds agent's call raised
    # and its framework ran it again after the orders agent had called its model; the two
    # runs were two calls
    def run(span_id: str, agent: str | None, error: str | None = None) -> Span:
        call = ToolCall(id="c1", name="lookup", arguments={"id": "R-9"}, error=error)
        named = {AGENT_NAME: agent} if agent else {}
        return Span(id=span_id, kind=SpanKind.TOOL, name="lookup", tool_call=call, attributes=named)

    def model(agent: str | None, *asked: str) -> Span:
        named = {AGENT_NAME: agent} if agent else {}
        requested = [ToolCall(id=call_id, name="lookup") for call_id in asked]
        return Span(kind=SpanKind.LLM, name="m", attributes=named, requested_tool_calls=requested)

    def calls(between: Span, agent: str | None = "refunds") -> list[str | None]:
        spans = [run("t1", agent, "timed out"), between, run("t2", agent)]
        return [call.error for call in Trace(spans=spans).tool_calls()]

    assert calls(model("orders")) == [None]  # one call, its last run
    assert calls(model("refunds")) == ["timed out", None]  # its own model asked again
    assert calls(model(None)) == ["timed out", None]  # a model call of no agent said
    assert calls(model("orders", "c1")) == ["timed out", None]  # it asked for the call's id
    assert calls(model("orders"), agent=None) == ["timed out", None]  # the call's agent unsaid
    # a model call the tool made itself, inside its first run (a summariser): one call
    assert calls(model(None).model_copy(update={"parent_id": "t1"})) == [None]


def test_a_model_call_of_an_agent_beside_a_retry_of_its_name_leaves_it_one_call() -> None:
    # two agents of one name sent at once (two agent spans under one graph): the other's
    # model call between two runs of a call made them two calls
    named = {AGENT_NAME: "checker"}

    def span(span_id: str, parent: str, kind: SpanKind = SpanKind.AGENT) -> Span:
        return Span(id=span_id, parent_id=parent, kind=kind, name="checker", attributes=named)

    def run(span_id: str, error: str | None = None) -> Span:
        call = ToolCall(id="c1", name="status", arguments={"job": "A"}, error=error)
        return Span(id=span_id, parent_id="a", kind=SpanKind.TOOL, name="status", tool_call=call)

    def calls(model_under: str, *more: Span) -> list[str | None]:
        graph = Span(id="graph", kind=SpanKind.AGENT, name="graph")
        model = span("m", model_under, SpanKind.LLM)
        spans = [graph, span("a", "graph"), *more, run("t1", "timed out"), model, run("t2")]
        return [call.error for call in Trace(spans=spans).tool_calls()]

    assert calls("b", span("b", "graph")) == [None]  # B's model call: one call, its last run
    assert calls("a") == ["timed out", None]  # A's own model asked again
    assert calls("a2", span("a2", "a")) == ["timed out", None]  # a sub-agent A runs
    # a model call under no agent span of its own, only the graph's
    assert calls("node", span("node", "graph", SpanKind.CHAIN)) == ["timed out", None]


def test_a_call_run_again_keeps_the_place_the_model_asked_for_it_in() -> None:
    # parallel calls: c1 failed and ran again after c2 had started; the model asked c1, c2
    def tool(span_id: str, call_id: str, error: str | None = None) -> Span:
        call = ToolCall(id=call_id, name=call_id, result=None if error else span_id, error=error)
        return Span(id=span_id, kind=SpanKind.TOOL, name=call_id, tool_call=call)

    trace = Trace(
        spans=[
            Span(id="m1", kind=SpanKind.LLM, name="llm"),
            tool("t1", "c1", "timed out"),
            tool("t2", "c2"),
            tool("t3", "c1"),
        ]
    )
    assert [(c.id, c.result) for c in trace.tool_calls()] == [("c1", "t3"), ("c2", "t2")]
    assert [[(c.id, c.result) for c in s.tool_calls] for s in trace.steps()] == [
        [("c1", "t3"), ("c2", "t2")]
    ]
