"""Spans written by OpenLLMetry's instrumentors (Traceloop's
opentelemetry-instrumentation-langchain, which writes the GenAI conventions,
opentelemetry-instrumentation-crewai and opentelemetry-instrumentation-llamaindex) around
real agent loops import to the trace agenteval's own handler captures of the same run, and
score the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from agenteval_otel import import_otlp
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph_agents import assert_job_checks_stepped
from test_openinference_import import (
    CLASSIC_RUNS,
    assert_classic_run,
    assert_summarisers_imported,
    view,
)

from agenteval_core import (
    AGENT_NAME,
    HANDOFF_TARGET,
    Engine,
    RunStatus,
    SpanKind,
    Trace,
    read_capture,
)
from agenteval_core.metrics import Coherence, ToolCallLoops, ToolFailures

_INSTRUMENTED = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from agenteval_core import OnlineEvaluator

orders, spans, capture = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
out = open(spans, "w", encoding="utf-8")
provider = TracerProvider()
exporter = ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\\n")
provider.add_span_processor(SimpleSpanProcessor(exporter))
"""


def langchain_script(imports: str, app: str, request: str) -> str:
    """A script that makes the LangChain app ``app`` (an expression, after ``imports``)
    under OpenLLMetry's instrumentor, as an application makes it, and invokes it with
    ``request`` under agenteval's handler too (a run that raises ends there: its trace says
    how)."""
    return (
        _INSTRUMENTED
        + f"""
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from agenteval_langchain import AgentEvalCallbackHandler
{imports}

LangchainInstrumentor().instrument(tracer_provider=provider)
app = {app}
with OnlineEvaluator(capture=capture, log=False) as evaluator:
    try:
        app.invoke({request}, {{"callbacks": [AgentEvalCallbackHandler(evaluator)]}})
    except ValueError:
        pass
provider.shutdown()
"""
    )


ASKED = '{"messages": [("user", "Where is A-1?")]}'
LANGCHAIN = langchain_script(
    "from test_openllmetry_import import lookup_agent", "lookup_agent(orders)", ASKED
)
TEAM = langchain_script(
    "from langchain.agents import create_agent\nfrom langgraph_agents import supervised_team",
    "supervised_team(create_agent)",
    ASKED,
)
SUMMARISERS = langchain_script(
    "from langgraph_agents import summarisers_sent_at_once",
    'summarisers_sent_at_once({"a": 1, "b": 1, "c": 1})',
    '{"docs": ["a", "b", "c"], "summaries": []}',
)
JOBS = langchain_script(
    "from langgraph_agents import jobs_checked_at_once",
    "jobs_checked_at_once()",
    '["J1", "J2", "J1", "J1"]',
)
CLASSIC = langchain_script(
    "from test_openinference_import import classic_executor",
    "classic_executor(orders)",
    '{"input": "Where is A-1?"}',
)

CREWAI = (
    _INSTRUMENTED
    + """
from opentelemetry.instrumentation.crewai import CrewAIInstrumentor
from agenteval_crewai import AgentEvalListener
from test_crewai_fidelity import one_call_crew
from crewai.tools import tool

CrewAIInstrumentor().instrument(tracer_provider=provider)

@tool("lookup_order")
def lookup_order(order_id: str) -> str:
    \"\"\"Status of an order.\"\"\"
    return f"{order_id} shipped"

with OnlineEvaluator(capture=capture, log=False) as evaluator:
    listener = AgentEvalListener(evaluator)
    one_call_crew(lookup_order, "A-1 has shipped").kickoff()
    assert listener.flush(20)
provider.shutdown()
"""
)

LLAMAINDEX = (
    _INSTRUMENTED
    + """
import asyncio
from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor
from agenteval_llamaindex import instrument
from llamaindex_models import CompletionModel, orders_index
from test_openllmetry_import import weather_agent

LlamaIndexInstrumentor().instrument(tracer_provider=provider)


async def run():
    cities = orders["cities"]
    try:
        await weather_agent(cities, orders["kind"]).run("Weather in " + " and ".join(cities) + "?")
    except RuntimeError:  # the model's provider failed: the run raises
        pass

# a query engine's index is built (spans of its own) before the evaluator records anything
engine = orders_index().as_query_engine(llm=CompletionModel()) if orders["kind"] == "query" else None
with OnlineEvaluator(capture=capture, log=False) as evaluator:
    instrument(evaluator)
    if engine is not None:
        engine.query("When did A-1 ship?")
    else:
        asyncio.run(run())
provider.shutdown()
"""
)


def weather_agent(cities: list[str], kind: str) -> Any:
    """A LlamaIndex agent whose model asks for the weather in each of ``cities`` in turn,
    then answers; the tool raises for Atlantis (the agent hands the model the error's text
    and goes on). ``kind``: "function" (a ``FunctionAgent``, native tool calls), "react"
    (a ``ReActAgent`` of the same calls in text) or "failing" (a ``FunctionAgent`` whose
    model's provider fails)."""
    from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
    from llama_index.core.llms.mock import MockFunctionCallingLLM
    from llama_index.core.tools import FunctionTool

    def get_weather(city: str) -> str:
        """Current weather for a city."""
        if city == "Atlantis":
            raise ValueError("no such city: Atlantis")
        return f"sunny in {city}"

    asked: list[str] = []

    def react(messages: list[ChatMessage], **_: Any) -> ChatMessage:
        if len(asked) < len(cities):
            asked.append(cities[len(asked)])
            text = (
                f"Thought: I need the weather in {asked[-1]}.\nAction: get_weather\n"
                f'Action Input: {{"city": "{asked[-1]}"}}'
            )
        else:
            text = "Thought: I can answer without using any more tools.\nAnswer: Paris is sunny."
        return ChatMessage(role=MessageRole.ASSISTANT, content=text)

    def reply(messages: list[ChatMessage], **_: Any) -> ChatMessage:
        if kind == "failing":
            raise RuntimeError("the provider answered 500")
        answered = sum(message.role == MessageRole.TOOL for message in messages)
        if answered < len(cities):
            call = ToolCallBlock(
                tool_call_id=f"w{answered + 1}",
                tool_name="get_weather",
                tool_kwargs={"city": cities[answered]},
            )
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])
        return ChatMessage(role=MessageRole.ASSISTANT, content="Paris is sunny.")

    tools = [FunctionTool.from_defaults(get_weather)]
    if kind == "react":
        return ReActAgent(tools=tools, llm=MockFunctionCallingLLM(response_generator=react))
    return FunctionAgent(tools=tools, llm=MockFunctionCallingLLM(response_generator=reply))


def lookup_agent(orders: list[str]) -> Any:
    """``create_agent`` with a lookup that raises for B-2 (nothing catches it, so the run
    fails) and answers for the others; its model asks for each of ``orders`` in turn, then
    answers "A-1 has shipped."."""

    @tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        if order_id == "B-2":
            raise ValueError("no order B-2")
        return f"{order_id} shipped"

    asks = [
        AIMessage("", tool_calls=[tool_call("lookup", f"c{n}", order_id=order)])
        for n, order in enumerate(orders, start=1)
    ]
    return create_agent(ScriptedChatModel(replies=[*asks, AIMessage("A-1 has shipped.")]), [lookup])


def both_ways(script: str, orders: Any, tmp_path: Path) -> tuple[Trace, list[Trace]]:
    """One run of an agent under agenteval's handler and OpenLLMetry's instrumentor at once
    (``script``), in a process of its own (OpenLLMetry's LangChain handler outlives its
    uninstrument(), and would write every later test's runs): (agenteval's capture, the
    import of OpenLLMetry's spans)."""
    spans, capture = tmp_path / "openllmetry.jsonl", tmp_path / "ours.jsonl"
    environment = {**os.environ, "TRACELOOP_TRACE_CONTENT": "true"}  # its default, said
    environment.pop("OTEL_SDK_DISABLED", None)  # conftest turns the SDK off
    environment["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), *sys.path])
    subprocess.run(
        [sys.executable, "-c", script, json.dumps(orders), str(spans), str(capture)],
        env=environment,
        check=True,
        timeout=120,
    )
    [ours] = read_capture(capture)
    return ours, import_otlp(spans)


IDS = {"latency_ms", "trace_id", "case_id"}  # a result's own: the traces' ids differ


@pytest.mark.parametrize(
    ("orders", "status", "answer"),
    [(["A-1"], RunStatus.OK, "A-1 has shipped."), (["A-1", "B-2"], RunStatus.ERROR, None)],
)
def test_an_openllmetry_run_imports_as_the_handler_captures_it(
    orders: list[str],
    status: RunStatus,
    answer: str | None,
    tmp_path: Path,
) -> None:
    # OpenLLMetry writes making the agent as a trace of its own (create_agent): it was one
    # more trace, "ok" with no input, that every metric passed; the run's request was its
    # GenAI message object, its answer missing (coherence assumed 1.0), and each tool
    # call's arguments LangChain's callback keywords ({"color": "green", ...}) with the
    # callback's payload as the result
    ours, imported = both_ways(LANGCHAIN, orders, tmp_path)
    [theirs] = imported
    want, got = view(ours), view(theirs)
    # OpenLLMetry has an agent span for the graph under its invoke_agent root, and a model
    # call that only asks for tools answers None where the handler records ""
    steps = [SpanKind.LLM, SpanKind.TOOL] * len(orders)
    finished = [SpanKind.LLM] if status is RunStatus.OK else []
    assert want.pop("kinds") == [SpanKind.AGENT, *steps, *finished]
    assert got.pop("kinds") == [SpanKind.AGENT, SpanKind.AGENT, *steps, *finished]
    answered = [answer] if status is RunStatus.OK else []
    assert [call[0] for call in got.pop("model_calls")] == [None] * len(orders) + answered
    assert [call[0] for call in want.pop("model_calls")] == [""] * len(orders) + answered
    assert got == want
    assert (theirs.input, theirs.output, theirs.status) == ("Where is A-1?", answer, status)
    found = {
        "id": "c1",
        "name": "lookup",
        "arguments": {"order_id": "A-1"},
        "result": "A-1 shipped",
        "error": None,
    }
    failed = {
        "id": "c2",
        "name": "lookup",
        "arguments": {"order_id": "B-2"},
        "result": None,
        "error": "ValueError: no order B-2",
    }
    assert [c.model_dump() for c in theirs.tool_calls()] == [found, failed][: len(orders)]
    for metric in (ToolFailures(), Coherence()):
        assert metric.measure(theirs).model_dump(exclude=IDS) == metric.measure(ours).model_dump(
            exclude=IDS
        )


def test_an_openllmetry_crew_imports_with_its_request_and_answer(tmp_path: Path) -> None:
    # OpenLLMetry's CrewAI spans hold no messages and no tool calls, only the crew's own
    # attributes: the import had no request and no answer, so coherence assumed 1.0. The
    # request is the first task's description, the answer the crew's result and the
    # session the crew's id, as the listener records a kickoff without inputs
    ours, imported = both_ways(CREWAI, [], tmp_path)
    [theirs] = imported
    assert (ours.input, ours.output) == ("Where is A-1?", "A-1 has shipped")
    assert (theirs.input, theirs.output, theirs.status, theirs.session_id) == (
        ours.input,
        ours.output,
        ours.status,
        ours.session_id,  # the crew's id: the kickoff names no session
    )
    assert [c.name for c in ours.tool_calls()] == ["lookup_order"]
    assert theirs.tool_calls() == [] and not theirs.spans_of(SpanKind.LLM)  # none written
    # the crew called lookup_order, which the spans do not show: not "no tool calls", 1.0
    assert (ours.steps_recorded, theirs.steps_recorded) == (True, False)
    for metric in (ToolFailures(), ToolCallLoops()):
        result = metric.measure(theirs)
        assert (result.score, result.skipped, result.metadata) == (
            None,
            True,
            {"steps_recorded": False},
        )
        assert metric.measure(ours).score == 1.0
    coherence = Coherence()
    assert coherence.measure(theirs).model_dump(exclude=IDS) == coherence.measure(ours).model_dump(
        exclude=IDS
    )


def test_an_openllmetry_llamaindex_run_imports_with_its_tool_calls(tmp_path: Path) -> None:
    # OpenLLMetry writes a LlamaIndex tool call on the agent's step that runs it, as
    # tool.name, tool.arguments and the step's result (traceloop.entity.output), with no
    # tool span and no failed status: the import had no tool call at all, so tool_failures
    # passed a run whose call failed ("no tool calls", 1.0)
    ours, imported = both_ways(
        LLAMAINDEX, {"kind": "function", "cities": ["Atlantis", "Paris"]}, tmp_path
    )
    [theirs] = imported
    assert (theirs.input, theirs.output, theirs.status) == (
        "Weather in Atlantis and Paris?",
        "Paris is sunny.",
        RunStatus.OK,
    )
    assert (ours.input, ours.output, ours.status) == (theirs.input, theirs.output, theirs.status)
    assert [c.model_dump() for c in theirs.tool_calls()] == [
        {
            "id": "w1",
            "name": "get_weather",
            "arguments": {"city": "Atlantis"},
            "result": None,
            "error": "no such city: Atlantis",
        },
        {
            "id": "w2",
            "name": "get_weather",
            "arguments": {"city": "Paris"},
            "result": "sunny in Paris",
            "error": None,
        },
    ]
    # the adapter also sees the exception the tool raised, and keeps the text the model got
    assert [c.model_dump() for c in ours.tool_calls()] == [
        {
            "id": "w1",
            "name": "get_weather",
            "arguments": {"city": "Atlantis"},
            "result": "no such city: Atlantis",
            "error": "ValueError: no such city: Atlantis",
        },
        theirs.tool_calls()[1].model_dump(),
    ]
    for metric in (ToolCallLoops(), Coherence()):
        assert metric.measure(theirs).model_dump(exclude=IDS) == metric.measure(ours).model_dump(
            exclude=IDS
        )
    # the same verdict on the same call; the failure says the error each trace holds
    failures = ToolFailures().measure(theirs)
    assert failures.model_dump(exclude=IDS | {"metadata"}) == ToolFailures().measure(
        ours
    ).model_dump(exclude=IDS | {"metadata"})
    assert (failures.score, failures.reason) == (
        0.75,
        "1 of 2 tool calls failed (get_weather), 0 not recovered",
    )


def test_an_openllmetry_llamaindex_react_run_answers_with_its_answer(tmp_path: Path) -> None:
    # OpenLLMetry's workflow span records no answer: the import took the last model call's
    # text, a ReAct agent's "Thought: ... Answer: ..." (coherence 0.406 where the answer
    # scores 0.637); the answer is the result of the step that ended the run, as the
    # adapter records it
    ours, imported = both_ways(LLAMAINDEX, {"kind": "react", "cities": ["Paris"]}, tmp_path)
    [theirs] = imported
    assert (theirs.input, theirs.output, theirs.status) == (
        "Weather in Paris?",
        "Paris is sunny.",
        RunStatus.OK,
    )
    assert (ours.input, ours.output, ours.status) == (theirs.input, theirs.output, theirs.status)
    paris = {"name": "get_weather", "arguments": {"city": "Paris"}, "result": "sunny in Paris"}
    assert [c.model_dump(exclude={"id", "error"}) for c in theirs.tool_calls()] == [paris]
    assert [c.model_dump(exclude={"id", "error"}) for c in ours.tool_calls()] == [paris]
    coherence = Coherence()
    assert coherence.measure(theirs).model_dump(exclude=IDS) == coherence.measure(ours).model_dump(
        exclude=IDS
    )


def test_an_openllmetry_llamaindex_run_whose_model_failed_is_not_a_pass(tmp_path: Path) -> None:
    # when the model raises, OpenLLMetry ends neither the model call's span nor the run's:
    # the file holds the workflow's first steps, under a root that never came. The import
    # made the first of them the root, a run "ok" with no input that coherence passed
    # ("empty input", 1.0); how the run ended is not in the spans, so it is unfinished
    ours, imported = both_ways(LLAMAINDEX, {"kind": "failing", "cities": ["Paris"]}, tmp_path)
    [theirs] = imported
    assert (ours.status, ours.error) == (RunStatus.ERROR, "RuntimeError: the provider answered 500")
    unknown = (
        "its root span is not among the spans read (the run raised where its instrumentor "
        "did not end that span, or the process stopped first): how it ended is unknown"
    )
    assert (theirs.status, theirs.status_reason, theirs.error) == (
        RunStatus.UNFINISHED,
        unknown,
        None,
    )
    [scored] = Engine(["coherence", "tool_failures"]).score_sync([theirs])
    for result in scored.results:
        assert (result.score, result.skipped) == (None, True)
        assert result.reason == f"not scored: how the run ended was not recorded ({unknown})"


def test_an_openllmetry_llamaindex_query_imports_as_one_run_with_its_question(
    tmp_path: Path,
) -> None:
    # OpenLLMetry writes a query engine's question and Response only as the root's
    # traceloop.entity.input and .output, and its completion model's call with no operation
    # named: the query imported with neither (coherence assumed 1.0) and no model call, and
    # building the index (the splitter, the embeddings) imported as two more "ok" runs with
    # no question that coherence passed too
    ours, imported = both_ways(LLAMAINDEX, {"kind": "query", "cities": []}, tmp_path)
    [theirs] = imported  # the index being built is no run
    assert (theirs.input, theirs.output, theirs.status) == (
        "When did A-1 ship?",
        "A-1 shipped on Monday.",
        RunStatus.OK,
    )
    assert (ours.input, ours.output, ours.status) == (theirs.input, theirs.output, theirs.status)
    assert [s.output for s in theirs.spans_of(SpanKind.LLM)] == ["A-1 shipped on Monday."]
    assert [s.output for s in ours.spans_of(SpanKind.LLM)] == ["A-1 shipped on Monday."]
    for metric in (Coherence(), ToolFailures()):
        assert metric.measure(theirs).model_dump(exclude=IDS) == metric.measure(ours).model_dump(
            exclude=IDS
        )


@pytest.mark.parametrize("kind", sorted(CLASSIC_RUNS))
def test_an_openllmetry_classic_agent_executor_run_imports_as_the_handler_captures_it(
    kind: str, tmp_path: Path
) -> None:
    # OpenLLMetry writes the executor's inputs and outputs only as gen_ai.task.input and
    # .output: a ReAct run imported with the model's whole prompt as its request and its
    # "Thought: ... Final Answer: ..." as the answer, a run stopped at max_iterations with
    # no answer and "ok", and the executor's _Exception "tool" as a call that succeeded
    ours, imported = both_ways(CLASSIC, kind, tmp_path)
    [theirs] = imported
    for trace in (ours, theirs):
        assert_classic_run(trace, kind)


def test_an_openllmetry_supervised_team_imports_with_its_agents_and_handoff(
    tmp_path: Path,
) -> None:
    # OpenLLMetry writes each named graph (the supervisor, its worker) as a task beside an
    # empty invoke_agent span naming it, and the handoff's goto as an empty span: no span
    # below an agent had its name, the agents had no request or answer, and no call said
    # where it handed the run
    ours, imported = both_ways(TEAM, None, tmp_path)
    [theirs] = imported

    def agents(trace: Trace) -> list[tuple[Any, ...]]:
        return [
            (s.kind, s.name if s.kind is not SpanKind.LLM else "", s.attributes.get(AGENT_NAME))
            + ((s.input, s.output) if s.kind is SpanKind.AGENT else ())
            for s in trace.spans
            if s.kind is not SpanKind.CHAIN and s.attributes.get(AGENT_NAME) != "LangGraph"
        ]

    named = [span for span in agents(ours) if span[2] is not None]
    assert named == agents(theirs)
    assert named == [
        (SpanKind.AGENT, "supervisor", "supervisor", "Where is A-1?", None),
        (SpanKind.LLM, "", "supervisor"),
        (SpanKind.TOOL, "transfer_to_orders_agent", "supervisor"),
        (SpanKind.AGENT, "orders_agent", "orders_agent", "Where is A-1?", "A-1 has shipped."),
        (SpanKind.LLM, "", "orders_agent"),
        (SpanKind.TOOL, "lookup_order", "orders_agent"),
        (SpanKind.LLM, "", "orders_agent"),
        (
            SpanKind.AGENT,
            "supervisor",
            "supervisor",
            "Where is A-1?",
            "Your order A-1 has shipped.",
        ),
        (SpanKind.LLM, "", "supervisor"),
    ]
    [transfer] = [s for s in theirs.spans if s.name == "transfer_to_orders_agent"]
    assert transfer.attributes[HANDOFF_TARGET] == "orders_agent"
    assert [s.name for s in theirs.spans if s.name.startswith("goto")] == []
    assert [(c.id, c.name, c.result) for c in theirs.tool_calls()] == [
        ("h1", "transfer_to_orders_agent", "Transferred to orders_agent"),
        ("o1", "lookup_order", "shipped"),
    ]
    assert (theirs.input, theirs.output, theirs.status) == (
        "Where is A-1?",
        "Your order A-1 has shipped.",
        RunStatus.OK,
    )


def test_openllmetry_nodes_sent_at_once_import_with_their_graph_step(tmp_path: Path) -> None:
    # OpenLLMetry writes a run's metadata as attributes, LangGraph's step among them: three
    # summarisers a map-reduce graph sent at once each read the style guide once, imported
    # as one call made three times (tool_call_loops 0.0, the handler's 1.0)
    ours, imported = both_ways(SUMMARISERS, None, tmp_path)
    [theirs] = imported
    assert_summarisers_imported(ours, theirs)


def test_openllmetry_functional_api_tasks_import_with_the_steps_the_adapter_gives(
    tmp_path: Path,
) -> None:
    # J1 checked three times and J2 once, in tasks started at once: LangGraph leaves each
    # task its entrypoint's step, and the import had all four side by side (tool_call_loops
    # 1.0, where the handler read the same work done three times)
    ours, imported = both_ways(JOBS, None, tmp_path)
    [theirs] = imported
    assert_job_checks_stepped(ours, [0, 0, 1, 2])
    assert_job_checks_stepped(theirs, [0, 0, 1, 2])
