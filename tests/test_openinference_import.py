"""Spans written by the real OpenInference instrumentors around real agent loops (scripted
models, real tools) import to the trace agenteval's own adapter captures of the same run,
compared field by field.

The instrumentors write through the SDK's file exporter (one span's JSON per line), the
way users keep OpenInference output on disk.
"""

from __future__ import annotations

import asyncio
import base64
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from agenteval_llamaindex import instrument
from agenteval_otel import import_otlp
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from langgraph.prebuilt import create_react_agent
from langgraph.types import Command, interrupt
from langgraph_agents import (
    ORDER_STATUS,
    Classifier,
    answered_by_its_tool,
    assert_fetched_once,
    assert_job_checks_stepped,
    flaky_fetch,
    functional_agent,
    jobs_checked_at_once,
    retrying_agent,
    summarisers_sent_at_once,
    supervised_team,
)
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llamaindex_hitl import (
    ApproveRefund,
    answered_at_once,
    refund_agent,
    resume,
    saved_when_it_asks,
)
from llamaindex_models import CompletionModel, orders_index
from openinference.instrumentation.crewai import CrewAIInstrumentor
from openinference.instrumentation.langchain import LangChainInstrumentor
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from pydantic import BaseModel
from workflows.errors import WorkflowCancelledByUser

from agenteval_core import (
    AGENT_NAME,
    GRAPH_STEP,
    INTERNAL_CALL,
    OnlineEvaluator,
    RunStatus,
    SpanKind,
    ToolCall,
    Trace,
)
from agenteval_core.metrics import ToolCallLoops, ToolFailures


@pytest.fixture
def spans_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)  # conftest turns the SDK off
    path = tmp_path / "openinference.jsonl"
    with path.open("w", encoding="utf-8") as out:
        provider = TracerProvider()
        exporter = ConsoleSpanExporter(
            out=out, formatter=lambda span: span.to_json(indent=None) + "\n"
        )
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        instrumentors = [LangChainInstrumentor(), LlamaIndexInstrumentor(), CrewAIInstrumentor()]
        for instrumentor in instrumentors:
            instrumentor.instrument(tracer_provider=provider)
        try:
            yield path
        finally:
            for instrumentor in instrumentors:
                instrumentor.uninstrument()
            provider.shutdown()


def view(trace: Trace) -> dict[str, Any]:
    """What a trace says about the run, field by field (not ids, times or chain internals)."""
    return {
        "input": trace.input,
        "output": trace.output,
        "session_id": trace.session_id,
        "metadata": trace.metadata,
        "status": trace.status,
        "error": trace.error,
        "tools": [(t.name, t.parameters) for t in trace.tools],
        "root": (trace.spans[0].kind, trace.spans[0].name),
        "kinds": [s.kind for s in trace.spans if s.kind is not SpanKind.CHAIN],
        "model_calls": [
            (
                s.output,
                [(c.id, c.name, c.arguments) for c in s.requested_tool_calls],
                s.attributes.get("gen_ai.usage.input_tokens"),
                s.attributes.get("gen_ai.usage.output_tokens"),
            )
            for s in trace.spans_of(SpanKind.LLM)
        ],
        "tool_calls": trace.tool_calls(),
    }


def both_ways(
    agent: Any, messages: list[Any], spans_file: Path, tmp_path: Path
) -> tuple[Trace, Trace]:
    """Run a LangChain ``agent`` on ``messages`` once, under agenteval's handler and the
    OpenInference instrumentor at once: (agenteval's capture, the import of the spans)."""
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        agent.invoke(
            {"messages": messages}, config={"callbacks": [AgentEvalCallbackHandler(evaluator)]}
        )
        [ours] = evaluator.captured()
    [theirs] = import_otlp(spans_file)
    return ours, theirs


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    if city == "Atlantis":
        raise ValueError("no such city")
    return {"Paris": "sunny, 21°C"}.get(city, "unknown")


def reply(content: str, calls: list[dict[str, Any]], tokens: tuple[int, int]) -> AIMessage:
    usage = {"input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)}
    return AIMessage(content=content, tool_calls=calls, usage_metadata=usage)  # type: ignore[arg-type]


def test_a_langgraph_agent_run(spans_file: Path, tmp_path: Path) -> None:
    model = ScriptedChatModel(
        replies=[
            reply("Let me check.", [tool_call("get_weather", "w1", city="Paris")], (40, 9)),
            reply("It is sunny and 21°C in Paris.", [], (61, 12)),
        ]
    )
    agent = create_agent(model, tools=[get_weather])
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        agent.invoke(
            {"messages": [("user", "What's the weather in Paris?")]},
            config={
                "callbacks": [AgentEvalCallbackHandler(evaluator)],
                "metadata": {"session_id": "s-1", "user_id": "u-7"},
            },
        )
        [ours] = evaluator.captured()
    [theirs] = import_otlp(spans_file)
    assert view(theirs) == view(ours)
    # and what that is, so the comparison cannot pass on two empty traces
    assert view(ours) == {
        "input": "What's the weather in Paris?",
        "output": "It is sunny and 21°C in Paris.",
        "session_id": "s-1",
        "metadata": {"session_id": "s-1", "user_id": "u-7"},
        "status": "ok",
        "error": None,
        "tools": [
            (
                "get_weather",
                {
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                    "type": "object",
                },
            )
        ],
        "root": (SpanKind.AGENT, "LangGraph"),
        "kinds": [SpanKind.AGENT, SpanKind.LLM, SpanKind.TOOL, SpanKind.LLM],
        "model_calls": [
            ("Let me check.", [("w1", "get_weather", {"city": "Paris"})], 40, 9),
            ("It is sunny and 21°C in Paris.", [], 61, 12),
        ],
        "tool_calls": [
            ToolCall(id="w1", name="get_weather", arguments={"city": "Paris"}, result="sunny, 21°C")
        ],
    }
    assert theirs.framework == "openinference"


def graph_steps(trace: Trace) -> list[tuple[SpanKind, str, Any]]:
    """The spans of a trace that say their graph step: kind, node name, step."""
    return [
        (s.kind, s.name.removeprefix("execute_task "), s.attributes[GRAPH_STEP])
        for s in trace.spans
        if GRAPH_STEP in s.attributes
    ]


def assert_summarisers_imported(ours: Trace, theirs: Trace) -> None:
    """The run of ``summarisers_sent_at_once`` (three summarisers, one read each) imported
    with each node run's graph step as the handler records them, and no loop in either."""
    steps = [(SpanKind.CHAIN, "__start__", 0)] + [(SpanKind.CHAIN, "summarise", 1)] * 3
    assert graph_steps(theirs) == graph_steps(ours) == steps
    for trace in (ours, theirs):
        loops = ToolCallLoops().measure(trace)
        assert (loops.score, loops.reason) == (
            1.0,
            "no repeated calls or cycles among 3 tool calls",
        )


def test_nodes_sent_at_once_import_with_their_graph_step(spans_file: Path, tmp_path: Path) -> None:
    # OpenInference writes LangGraph's step in each run's metadata: three summarisers a
    # map-reduce graph sent at once imported without it, so their one read of the style
    # guide each was one call made three times (tool_call_loops 0.0, the handler's 1.0)
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        summarisers_sent_at_once({"a": 1, "b": 1, "c": 1}).invoke(
            {"docs": ["a", "b", "c"], "summaries": []},
            {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
        )
        [ours] = evaluator.captured()
    [theirs] = import_otlp(spans_file)
    assert_summarisers_imported(ours, theirs)


def test_a_request_with_an_image_imports_with_its_text_and_its_image(
    spans_file: Path, tmp_path: Path
) -> None:
    # OpenInference writes a message of content blocks as its `contents`, with no `content`:
    # the import had the run's input as {"role": "user"}, which coherence then embedded
    image = base64.b64encode(b"\x89PNG\r\n" + bytes(range(256)) * 10).decode()
    blocks = [
        {"type": "text", "text": "What's the weather in the city on this photo?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
    ]
    model = ScriptedChatModel(
        replies=[
            reply("Let me check.", [tool_call("get_weather", "w1", city="Paris")], (40, 9)),
            reply("It is sunny and 21°C in Paris.", [], (61, 12)),
        ]
    )
    agent = create_agent(model, tools=[get_weather])
    ours, theirs = both_ways(agent, [HumanMessage(content=blocks)], spans_file, tmp_path)
    assert view(theirs) == view(ours)
    assert (theirs.input, theirs.output) == (
        "What's the weather in the city on this photo?",
        "It is sunny and 21°C in Paris.",
    )
    assert theirs.request_media() == ours.request_media() == ["image"]
    for trace in (ours, theirs):
        for call in trace.spans_of(SpanKind.LLM):
            sent = call.input[0] if trace is ours else call.input  # LangChain sends a batch
            assert sent[0]["content"] == blocks


def test_a_run_from_a_checkpoint_imports_with_its_request(spans_file: Path, tmp_path: Path) -> None:
    # invoke(None, config) from an earlier checkpoint (time travel): the root span has no
    # input, and the import's input was None, which coherence scores as a perfect pass
    model = ScriptedChatModel(
        replies=[
            reply("Let me check.", [tool_call("get_weather", "w1", city="Paris")], (40, 9)),
            reply("It is sunny and 21°C in Paris.", [], (61, 12)),
        ]
    )
    agent = create_agent(model, tools=[get_weather], checkpointer=InMemorySaver())
    thread: Any = {"configurable": {"thread_id": "t-1"}}
    agent.invoke({"messages": [("user", "What's the weather in Paris?")]}, thread)
    fork = next(s for s in reversed(list(agent.get_state_history(thread))) if s.next == ("model",))
    earlier = len(spans_file.read_text().splitlines())
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        agent.invoke(None, {**fork.config, "callbacks": [AgentEvalCallbackHandler(evaluator)]})
        [ours] = evaluator.captured()
    forked = tmp_path / "fork.jsonl"  # the fork's spans alone
    forked.write_text("".join(spans_file.read_text().splitlines(keepends=True)[earlier:]))
    [theirs] = import_otlp(forked)
    assert view(theirs) == view(ours)
    assert (theirs.input, theirs.output) == (
        "What's the weather in Paris?",
        "It is sunny and 21°C in Paris.",
    )


def test_a_run_paused_for_a_human_imports_as_paused(spans_file: Path, tmp_path: Path) -> None:
    # OpenInference ends a run that paused at an interrupt() without an error (the node's
    # GraphInterrupt is an exception event only): imported, it was "ok" with an empty
    # answer, which coherence scored as a perfect pass and compare judged as the answer
    @tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    model = ScriptedChatModel(
        replies=[
            reply("", [tool_call("refund", "r1", order_id="A-1")], (30, 8)),
            reply("Refunded A-1.", [], (45, 5)),
        ]
    )
    agent = create_agent(
        model,
        tools=[refund],
        checkpointer=InMemorySaver(),
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"refund": True})],
    )
    thread: Any = {"configurable": {"thread_id": "t-1"}}
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        handler = AgentEvalCallbackHandler(evaluator)
        agent.invoke({"messages": [("user", "Refund A-1")]}, {**thread, "callbacks": [handler]})
        approve = Command(resume={"decisions": [{"type": "approve"}]})
        agent.invoke(approve, {**thread, "callbacks": [handler]})
        ours_paused, ours_resumed = evaluator.captured()
    paused, resumed = import_otlp(spans_file)
    assert view(paused) == view(ours_paused)
    assert (paused.input, paused.output, paused.status) == (
        "Refund A-1",
        None,
        RunStatus.INTERRUPTED,
    )
    assert paused.status_reason == ours_paused.status_reason
    assert paused.status_reason is not None
    assert paused.status_reason.startswith("waiting for a human: {'action_requests': [{'name'")
    assert (resumed.output, resumed.status) == ("Refunded A-1.", RunStatus.OK)
    assert [(c.id, c.name, c.arguments, c.result) for c in resumed.tool_calls()] == [
        ("r1", "refund", {"order_id": "A-1"}, "refunded")
    ]
    assert resumed.tool_calls() == ours_resumed.tool_calls()
    # the reviewer's answer, and the paused run it goes on from, as ours has them: neither
    # had come through (a judge was not told the answer, a regression case lost it)
    assert resumed.metadata == {
        "thread_id": "t-1",
        "resume": {"decisions": [{"type": "approve"}]},
        "resumes_trace_id": paused.id,
    }
    assert ours_resumed.metadata == {**resumed.metadata, "resumes_trace_id": ours_paused.id}


def test_interrupts_answered_at_once_by_id_import_with_what_each_asked(
    spans_file: Path, tmp_path: Path
) -> None:
    # two refunds, each approved in its tool at once (two interrupts, parallel tool tasks),
    # answered by id: OpenInference writes each interrupt's id and value in its node's
    # exception, and the resumed run's input; the import had the answers by id alone
    @tool
    def refund(order_id: str) -> str:
        """Refund an order once a reviewer approves it."""
        approved = interrupt(f"Approve the refund of {order_id}?") == "yes"
        return f"refunded {order_id}" if approved else f"refund of {order_id} rejected"

    model = ScriptedChatModel(
        replies=[
            reply(
                "",
                [
                    tool_call("refund", "c1", order_id="A-1"),
                    tool_call("refund", "c2", order_id="B-2"),
                ],
                (30, 8),
            ),
            reply("A-1 refunded, B-2 not.", [], (45, 5)),
        ]
    )
    agent = create_agent(model, tools=[refund], checkpointer=InMemorySaver())
    thread: Any = {"configurable": {"thread_id": "t-1"}}
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        handler = AgentEvalCallbackHandler(evaluator)
        config = {**thread, "callbacks": [handler]}
        paused_at = agent.invoke({"messages": [("user", "Refund A-1 and B-2")]}, config)
        answers = {i.id: "yes" if "A-1" in i.value else "no" for i in paused_at["__interrupt__"]}
        agent.invoke(Command(resume=answers), config)
        ours_paused, ours_resumed = evaluator.captured()
    paused, resumed = import_otlp(spans_file)
    assert (paused.status, resumed.status) == (RunStatus.INTERRUPTED, RunStatus.OK)
    assert (paused.status_reason, ours_paused.status_reason) == (
        "waiting for a human: Approve the refund of A-1?; Approve the refund of B-2?",
    ) * 2  # every interrupt it waits at (the first only had been read), unquoted as ours
    asked = {i.id: i.value for i in paused_at["__interrupt__"]}
    assert resumed.metadata == {
        "thread_id": "t-1",
        "resume": answers,
        "resume_questions": asked,
        "resumes_trace_id": paused.id,
    }
    assert ours_resumed.metadata == {**resumed.metadata, "resumes_trace_id": ours_paused.id}


def test_a_langgraph_run_that_failed_in_its_tool(spans_file: Path, tmp_path: Path) -> None:
    model = ScriptedChatModel(
        replies=[reply("", [tool_call("get_weather", "w1", city="Atlantis")], (30, 8))]
    )
    agent = create_agent(model, tools=[get_weather])
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        with pytest.raises(ValueError, match="no such city"):
            agent.invoke(
                {"messages": [("user", "Weather in Atlantis?")]},
                config={"callbacks": [AgentEvalCallbackHandler(evaluator)]},
            )
        [ours] = evaluator.captured()
    [theirs] = import_otlp(spans_file)
    assert view(theirs) == view(ours)
    assert ours.status is RunStatus.ERROR and ours.output is None
    [failed] = ours.tool_calls()
    assert failed.model_dump() == {
        "id": "w1",
        "name": "get_weather",
        "arguments": {"city": "Atlantis"},
        "result": None,
        "error": "ValueError: no such city",
    }


def test_a_call_its_retry_middleware_ran_again_imports_as_one_call(
    spans_file: Path, tmp_path: Path
) -> None:
    # the model asked once; ToolRetryMiddleware ran the call three times. The second run
    # found the request taken by the first and imported without an id: three calls, a loop
    agent, runs = retrying_agent()
    ours, theirs = both_ways(agent, [("user", "Where is A-1?")], spans_file, tmp_path)
    assert runs == ["A-1"] * 3
    assert view(theirs) == view(ours)
    timed_out = "ConnectionError: orders API timed out"
    for trace in (ours, theirs):
        assert [(c.id, c.result, c.error) for c in trace.tool_calls(every_run=True)] == [
            ("c1", None, timed_out),
            ("c1", None, timed_out),
            ("c1", "A-1 shipped", None),
        ]
        assert [(c.id, c.name, c.arguments, c.result) for c in trace.tool_calls()] == [
            ("c1", "lookup", {"order_id": "A-1"}, "A-1 shipped")
        ]
        assert ToolCallLoops().measure(trace).score == 1.0


def test_the_result_of_a_tool_that_returns_directly_imports_as_the_answer(
    spans_file: Path, tmp_path: Path
) -> None:
    agent = answered_by_its_tool()
    ours, theirs = both_ways(agent, [("user", "Where is order A-1?")], spans_file, tmp_path)
    assert view(theirs) == view(ours)
    assert (theirs.output, theirs.status) == (ORDER_STATUS, RunStatus.OK)


def test_runs_stopped_by_a_limit_or_their_caller_import_with_that_status(
    spans_file: Path, tmp_path: Path
) -> None:
    # OpenInference records the exception that ended a run: a recursion limit, or the
    # CancelledError of a run its caller stopped (asyncio.wait_for). Imported, both were
    # "error", where the adapter records "limit" and "cancelled"
    @tool
    def lookup(order_id: str) -> str:
        """Status of an order."""
        return "pending"

    @tool
    async def slow_lookup(order_id: str) -> str:
        """Status of an order, from a slow service."""
        await asyncio.Event().wait()  # never answers: the caller gives up
        return "pending"

    def asks(name: str, count: int) -> ScriptedChatModel:
        calls = [
            reply("", [tool_call(name, f"c{i}", order_id="A-1")], (20, 5)) for i in range(count)
        ]
        return ScriptedChatModel(replies=calls)

    looping = create_agent(asks("lookup", 10), tools=[lookup])
    stuck = create_agent(asks("slow_lookup", 1), tools=[slow_lookup])
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        handler = AgentEvalCallbackHandler(evaluator)
        with pytest.raises(GraphRecursionError):
            looping.invoke(
                {"messages": [("user", "Where is A-1?")]},
                {"callbacks": [handler], "recursion_limit": 5},
            )
        run = stuck.ainvoke({"messages": [("user", "Where is A-1?")]}, {"callbacks": [handler]})
        with pytest.raises(TimeoutError):
            asyncio.run(asyncio.wait_for(run, 0.5))
        ours = evaluator.captured()
    theirs = import_otlp(spans_file)
    assert [(t.status, t.output) for t in theirs] == [(t.status, t.output) for t in ours]
    assert [t.status for t in theirs] == [RunStatus.LIMIT, RunStatus.CANCELLED]
    assert [len(t.tool_calls()) for t in theirs] == [len(t.tool_calls()) for t in ours] == [2, 1]
    assert "GraphRecursionError: Recursion limit of 5 reached" in str(theirs[0].status_reason)
    assert theirs[1].status_reason == "cancelled by its caller"


def test_an_answer_cut_at_the_token_limit_imports_as_a_limit(
    spans_file: Path, tmp_path: Path
) -> None:
    # OpenInference keeps each model call's finish reason (llm.finish_reason): imported,
    # a final answer cut at the output token limit read as a completed run
    cut = reply("It is sunny and 21°C in", [], (61, 12))
    cut.response_metadata = {"finish_reason": "length"}
    model = ScriptedChatModel(
        replies=[reply("", [tool_call("get_weather", "w1", city="Paris")], (40, 9)), cut]
    )
    agent = create_agent(model, tools=[get_weather])
    ours, theirs = both_ways(
        agent, [("user", "What's the weather in Paris?")], spans_file, tmp_path
    )
    assert view(theirs) == view(ours)
    reason = "the answer was cut at the model's output token limit (finish reason length)"
    for trace in (ours, theirs):
        assert (trace.status, trace.status_reason, trace.output) == (
            RunStatus.LIMIT,
            reason,
            "It is sunny and 21°C in",
        )
        assert [
            s.attributes.get("gen_ai.response.finish_reasons") for s in trace.spans_of(SpanKind.LLM)
        ] == [None, ["length"]]


def test_a_call_of_a_tool_the_agent_does_not_have_imports_as_a_failed_call(
    spans_file: Path, tmp_path: Path
) -> None:
    # LangChain's tool node answers it with an error message and runs no tool, so
    # OpenInference writes no tool span: the call is in the next model call's input only
    model = ScriptedChatModel(
        replies=[
            reply("", [tool_call("get_forecast", "f1", city="Paris")], (30, 8)),
            reply("", [tool_call("get_weather", "w1", city="Paris")], (40, 9)),
            reply("It is sunny and 21°C in Paris.", [], (50, 10)),
        ]
    )
    agent = create_agent(model, tools=[get_weather])
    ours, theirs = both_ways(agent, [("user", "Weather in Paris?")], spans_file, tmp_path)
    assert view(theirs) == view(ours)
    unknown = "Error: get_forecast is not a valid tool, try one of [get_weather]."
    for trace in (ours, theirs):
        assert trace.tool_calls() == [
            ToolCall(
                id="f1",
                name="get_forecast",
                arguments={"city": "Paris"},
                result=unknown,
                error=unknown,
            ),
            ToolCall(
                id="w1", name="get_weather", arguments={"city": "Paris"}, result="sunny, 21°C"
            ),
        ]
        [not_run] = [s for s in trace.spans_of(SpanKind.TOOL) if s.tool_call.id == "f1"]
        assert not_run.attributes["agenteval.tool.not_run"] is True


def test_a_long_conversations_model_call_imports_saying_which_messages_the_file_lost(
    spans_file: Path, tmp_path: Path
) -> None:
    # 35 turns before the request: the SDK keeps 128 attributes on a span and drops the
    # oldest set, OpenInference's first messages among them (and input.value). The import
    # gave the messages left as the call's whole input
    history: list[Any] = []
    for n in range(35):
        history += [("user", f"question {n}"), ("assistant", f"answer {n}")]
    model = ScriptedChatModel(
        replies=[
            reply("", [tool_call("get_weather", "w1", city="Paris")], (30, 8)),
            reply("It is sunny and 21°C in Paris.", [], (50, 10)),
        ]
    )
    agent = create_agent(model, tools=[get_weather])
    ours, theirs = both_ways(agent, [*history, ("user", "Weather in Paris?")], spans_file, tmp_path)
    sent = [s.input[0] for s in ours.spans_of(SpanKind.LLM)]  # a batch of one prompt
    for whole, model_call in zip(sent, theirs.spans_of(SpanKind.LLM), strict=True):
        left_out = model_call.attributes["agenteval.llm.input_messages.left_out"]
        assert left_out > 0 and len(model_call.input) + left_out == len(whole)
        # the messages left are the conversation's latest, each whole
        assert [(m["role"], m["content"]) for m in model_call.input[:2]] == [
            ({"human": "user", "ai": "assistant"}[m["role"]], m["content"])
            for m in whole[left_out : left_out + 2]
        ]
    assert (theirs.input, theirs.output) == (ours.input, ours.output)
    assert theirs.tool_calls() == ours.tool_calls()


def test_a_call_whose_arguments_could_not_be_read_imports_as_a_failed_call(
    spans_file: Path, tmp_path: Path
) -> None:
    # the model cut its call's JSON short: LangChain keeps it in invalid_tool_calls, no
    # tool runs it and the agent ends with an empty answer; OpenInference keeps it only in
    # the model call's output.value, and the imported run had no call at all
    cut_short = AIMessage(
        content="",
        invalid_tool_calls=[
            {
                "type": "invalid_tool_call",
                "id": "w1",
                "name": "get_weather",
                "args": '{"city": "Par',
                "error": "Unterminated string",
            }
        ],
        usage_metadata={"input_tokens": 30, "output_tokens": 8, "total_tokens": 38},
    )
    agent = create_agent(ScriptedChatModel(replies=[cut_short]), tools=[get_weather])
    ours, theirs = both_ways(agent, [("user", "Weather in Paris?")], spans_file, tmp_path)
    assert view(theirs) == view(ours)
    unread = ToolCall(
        id="w1",
        name="get_weather",
        error='the model\'s arguments could not be read (Unterminated string): {"city": "Par',
    )
    for trace in (ours, theirs):
        assert trace.tool_calls() == [unread]
        [model_call] = trace.spans_of(SpanKind.LLM)
        [tool_span] = trace.spans_of(SpanKind.TOOL)
        assert tool_span.parent_id == model_call.id
        assert ToolFailures().measure(trace).score == 0.0


def test_a_middlewares_own_model_calls_import_as_no_steps(spans_file: Path, tmp_path: Path) -> None:
    # SummarizationMiddleware and LLMToolSelectorMiddleware mark their model calls in the
    # run's metadata (lc_internal_call), which OpenInference keeps: imported, they were
    # steps of the agent and the selector's schema one of its tools
    from langchain.agents.middleware import LLMToolSelectorMiddleware, SummarizationMiddleware

    @tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    summarizer = ScriptedChatModel(replies=[AIMessage("The user asked about A-0.")])
    choice = tool_call("ToolSelectionResponse", "s1", tools=["get_weather"])
    selector = ScriptedChatModel(replies=[AIMessage("", tool_calls=[choice])])
    model = ScriptedChatModel(
        replies=[
            reply("", [tool_call("get_weather", "w1", city="Paris")], (30, 8)),
            reply("It is sunny and 21°C in Paris.", [], (50, 10)),
        ]
    )
    middleware = [
        SummarizationMiddleware(summarizer, trigger=("messages", 4), keep=("messages", 2)),
        LLMToolSelectorMiddleware(model=selector, max_tools=1),
    ]
    agent = create_agent(model, tools=[get_weather, refund], middleware=middleware)
    history = [("user", "Where is A-0?"), ("ai", "A-0 is late."), ("user", "Thanks.")]
    ours, theirs = both_ways(agent, [*history, ("user", "Weather in Paris?")], spans_file, tmp_path)
    for trace in (ours, theirs):
        internal = [s.attributes.get(INTERNAL_CALL) for s in trace.spans_of(SpanKind.LLM)]
        assert internal == [True, True, None, True, True, None]
        assert [t.name for t in trace.tools] == ["get_weather"]
        assert [(step.output, step.tool_calls) for step in trace.steps()] == [
            (
                None,
                [
                    ToolCall(
                        id="w1",
                        name="get_weather",
                        arguments={"city": "Paris"},
                        result="sunny, 21°C",
                    )
                ],
            ),
            ("It is sunny and 21°C in Paris.", []),
        ]


def test_a_model_call_in_a_middlewares_hook_imports_as_no_step(
    spans_file: Path, tmp_path: Path
) -> None:
    # a middleware's before_model hook asking a model whether the request is safe: its
    # node (langgraph_node "SafetyCheck.before_model") is in the run metadata OpenInference
    # keeps; imported, each check was a step whose output a judge read as the agent's
    from langchain.agents.middleware import AgentMiddleware

    checker = ScriptedChatModel(replies=[AIMessage("SAFE")])

    class SafetyCheck(AgentMiddleware):
        def before_model(self, state: Any, runtime: Any) -> None:
            checker.invoke(f"Is this safe? {state['messages'][-1].content}")

    model = ScriptedChatModel(
        replies=[
            reply("", [tool_call("get_weather", "w1", city="Paris")], (30, 8)),
            reply("It is sunny and 21°C in Paris.", [], (50, 10)),
        ]
    )
    agent = create_agent(model, tools=[get_weather], middleware=[SafetyCheck()])
    ours, theirs = both_ways(agent, [("user", "Weather in Paris?")], spans_file, tmp_path)
    assert view(theirs) == view(ours)
    for trace in (ours, theirs):
        assert [
            (s.output, s.attributes.get(INTERNAL_CALL)) for s in trace.spans_of(SpanKind.LLM)
        ] == [("SAFE", True), ("", None), ("SAFE", True), ("It is sunny and 21°C in Paris.", None)]
        assert [(step.output, [c.id for c in step.tool_calls]) for step in trace.steps()] == [
            (None, ["w1"]),
            ("It is sunny and 21°C in Paris.", []),
        ]


def test_a_decision_models_call_imports_as_no_step(spans_file: Path, tmp_path: Path) -> None:
    # AutoModeMiddleware asks a decision model whether a call is risky, in the tool node:
    # OpenInference writes the decision model's run as an LLM span without messages, and
    # the model call inside it was a step, which took the agent's tool call as its own
    from langchain.agents.middleware import AutoModeMiddleware

    checker = ScriptedChatModel(replies=[AIMessage("SAFE")])
    model = ScriptedChatModel(
        replies=[
            reply("", [tool_call("get_weather", "w1", city="Paris")], (30, 8)),
            reply("It is sunny and 21°C in Paris.", [], (50, 10)),
        ]
    )
    agent = create_agent(
        model,
        tools=[get_weather],
        middleware=[AutoModeMiddleware(tools=["get_weather"], classifier=Classifier(llm=checker))],
    )
    ours, theirs = both_ways(agent, [("user", "Weather in Paris?")], spans_file, tmp_path)
    assert view(theirs) == view(ours)
    for trace in (ours, theirs):
        assert [s.output for s in trace.spans_of(SpanKind.LLM)] == [
            "",
            "SAFE",
            "It is sunny and 21°C in Paris.",
        ]
        assert [(step.output, [c.id for c in step.tool_calls]) for step in trace.steps()] == [
            (None, ["w1"]),
            ("It is sunny and 21°C in Paris.", []),
        ]


class OrderStatus(BaseModel):
    order_id: str
    status: str


def test_a_prebuilt_agents_structured_answer_call_imports_as_no_step(
    spans_file: Path, tmp_path: Path
) -> None:
    # create_react_agent(response_format=...) asks the model for the structured answer in a
    # node of its own after the loop (its run metadata says which node)
    script = [
        reply("", [tool_call("get_weather", "w1", city="Paris")], (30, 8)),
        reply("It is sunny and 21°C in Paris.", [], (50, 10)),
        reply("", [tool_call("OrderStatus", "s1", order_id="A-1", status="ok")], (20, 5)),
    ]
    agent = create_react_agent(
        ScriptedChatModel(replies=script), tools=[get_weather], response_format=OrderStatus
    )
    ours, theirs = both_ways(agent, [("user", "Weather in Paris?")], spans_file, tmp_path)
    for trace in (ours, theirs):
        assert [t.name for t in trace.tools] == ["get_weather"]
        assert [(step.output, [c.id for c in step.tool_calls]) for step in trace.steps()] == [
            (None, ["w1"]),
            ("It is sunny and 21°C in Paris.", []),
        ]


def test_a_structured_answer_through_its_schema_imports_as_the_answer(
    spans_file: Path, tmp_path: Path
) -> None:
    # create_agent(response_format=ToolStrategy(...)): the model answers by "calling" the
    # schema. Imported, the run's answer was the last AI message's empty text (an empty
    # answer a completed run's embedding metrics pass) and the schema one of its tools
    from langchain.agents.structured_output import ToolStrategy

    script = [
        reply("", [tool_call("get_weather", "w1", city="Paris")], (30, 8)),
        reply("", [tool_call("OrderStatus", "s1", order_id="A-1", status="ok")], (50, 10)),
    ]
    agent = create_agent(
        ScriptedChatModel(replies=script),
        tools=[get_weather],
        response_format=ToolStrategy(OrderStatus),
    )
    ours, theirs = both_ways(agent, [("user", "Weather in Paris?")], spans_file, tmp_path)
    assert view(theirs) == view(ours)
    for trace in (ours, theirs):
        assert trace.output == {"order_id": "A-1", "status": "ok"}
        assert [t.name for t in trace.tools] == ["get_weather"]
        assert [c.id for c in trace.tool_calls()] == ["w1"]


def llamaindex_both_ways(agent: Any, spans_file: Path, tmp_path: Path) -> tuple[Any, Trace, Trace]:
    """Run a LlamaIndex ``agent`` on "What's the weather in Paris?" once, under agenteval's
    instrumentation and the OpenInference instrumentor at once: (the run's result,
    agenteval's capture, the import of the spans)."""
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        instrumented = instrument(evaluator)
        try:

            async def run() -> Any:
                return await agent.run("What's the weather in Paris?")

            result = asyncio.run(run())
            [ours] = evaluator.captured()
        finally:
            instrumented.uninstrument()
    [theirs] = import_otlp(spans_file)
    return result, ours, theirs


def scripted_llm(messages: list[ChatMessage], **_: object) -> ChatMessage:
    if not any(m.role == MessageRole.TOOL for m in messages):
        call = ToolCallBlock(
            tool_call_id="w1", tool_name="get_weather", tool_kwargs={"city": "Paris"}
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])
    return ChatMessage(role=MessageRole.ASSISTANT, content="It is sunny and 21°C in Paris.")


def weather(city: str) -> str:
    """Current weather for a city."""
    return {"Paris": "sunny, 21°C"}.get(city, "unknown")


class _BeforeAgent(AgentMiddleware):  # type: ignore[type-arg]
    """A middleware with a hook before the agent runs (as deep agents' PatchToolCalls has)."""

    def before_agent(self, state: Any, runtime: Any) -> None:
        return None


def test_a_sub_agent_a_tool_runs_imports_as_the_handler_records_it(
    spans_file: Path, tmp_path: Path
) -> None:
    # a supervisor's tool that asks a sub-agent and answers with a Command (as deep agents'
    # task tool does): the import had the sub-agent as a chain, its calls as the
    # supervisor's, the call's result as the serialised Command, and the middleware's
    # before_agent hook as an agent
    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return f"{order_id}: shipped"

    checker_model = ScriptedChatModel(
        replies=[
            reply("", [tool_call("lookup_order", "l1", order_id="A-1")], (10, 2)),
            reply("A-1 shipped.", [], (12, 3)),
        ]
    )
    checker = create_agent(checker_model, tools=[lookup_order], name="order-checker")

    @tool
    def check_order(request: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:  # type: ignore[type-arg]
        """Ask the order checker."""
        answer = checker.invoke({"messages": [("user", request)]})["messages"][-1].content
        return Command(update={"messages": [ToolMessage(answer, tool_call_id=tool_call_id)]})

    model = ScriptedChatModel(
        replies=[
            reply("", [tool_call("check_order", "k1", request="Where is A-1?")], (20, 4)),
            reply("Your order A-1 shipped.", [], (30, 5)),
        ]
    )
    agent = create_agent(model, tools=[check_order], middleware=[_BeforeAgent()])
    ours, theirs = both_ways(agent, [("user", "Where is my order A-1?")], spans_file, tmp_path)
    assert view(theirs) == view(ours)

    def sub_agent(trace: Trace) -> list[tuple[Any, ...]]:
        spans = [s for s in trace.spans if s.attributes.get(AGENT_NAME) == "order-checker"]
        # (an LLM span is named after the model by us, after its class by OpenInference)
        kinds = [(s.kind, s.name if s.kind is not SpanKind.LLM else "") for s in spans]
        return [(spans[0].input, spans[0].output), *kinds]

    assert sub_agent(theirs) == sub_agent(ours)
    assert sub_agent(ours)[:3] == [
        ("Where is A-1?", "A-1 shipped."),
        (SpanKind.AGENT, "order-checker"),
        (SpanKind.CHAIN, "model"),
    ]
    assert [(s.kind, s.name) for s in theirs.spans if s.name.endswith("before_agent")] == [
        (SpanKind.CHAIN, "_BeforeAgent.before_agent")
    ]
    assert [(c.id, c.name, c.result) for c in theirs.tool_calls()] == [
        ("k1", "check_order", "A-1 shipped."),
        ("l1", "lookup_order", "A-1: shipped"),
    ]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # create_react_agent moved in v1
@pytest.mark.parametrize("builder", [create_agent, create_react_agent])
def test_a_supervised_team_imports_with_its_agents_as_the_handler_records_them(
    builder: Any, spans_file: Path, tmp_path: Path
) -> None:
    # OpenInference calls a run an agent when its name holds "agent": the supervisor's
    # handoff tool transfer_to_orders_agent imported as an agent span (its call "not run"),
    # every "agent" node and subgraph node as another agent, and no span had its agent's
    # name
    ours, theirs = both_ways(
        supervised_team(builder), [("user", "Where is A-1?")], spans_file, tmp_path
    )
    assert view(theirs) == view(ours)

    def agents(trace: Trace) -> list[tuple[Any, ...]]:
        return [
            (s.kind, s.name if s.kind is not SpanKind.LLM else "", s.attributes.get(AGENT_NAME))
            for s in trace.spans
            if s.kind is not SpanKind.CHAIN
        ]

    assert agents(theirs) == agents(ours)
    assert agents(ours) == [
        (SpanKind.AGENT, "LangGraph", None),
        (SpanKind.AGENT, "supervisor", "supervisor"),
        (SpanKind.LLM, "", "supervisor"),
        (SpanKind.TOOL, "transfer_to_orders_agent", "supervisor"),
        (SpanKind.AGENT, "orders_agent", "orders_agent"),
        (SpanKind.LLM, "", "orders_agent"),
        (SpanKind.TOOL, "lookup_order", "orders_agent"),
        (SpanKind.LLM, "", "orders_agent"),
        (SpanKind.AGENT, "supervisor", "supervisor"),
        (SpanKind.LLM, "", "supervisor"),
    ]
    [transfer] = [s for s in theirs.spans if s.name == "transfer_to_orders_agent"]
    assert transfer.attributes == {
        "gen_ai.agent.name": "supervisor",
        "agenteval.handoff.goto": "orders_agent",
    }
    assert [(c.id, c.name, c.result) for c in theirs.tool_calls()] == [
        ("h1", "transfer_to_orders_agent", "Transferred to orders_agent"),
        ("o1", "lookup_order", "shipped"),
    ]


def test_a_llamaindex_function_agent_run(spans_file: Path, tmp_path: Path) -> None:
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(weather, name="get_weather")],
        llm=MockFunctionCallingLLM(response_generator=scripted_llm),
    )
    _, ours, theirs = llamaindex_both_ways(agent, spans_file, tmp_path)
    want, got = view(ours), view(theirs)
    # agenteval adds a span per AgentWorkflow agent turn ("Agent" under the run), which
    # OpenInference does not have; LlamaIndex's mock model names no model in either
    assert want.pop("kinds") == [
        SpanKind.AGENT,
        SpanKind.AGENT,
        SpanKind.LLM,
        SpanKind.TOOL,
        SpanKind.LLM,
    ]
    assert got.pop("kinds") == [SpanKind.AGENT, SpanKind.LLM, SpanKind.TOOL, SpanKind.LLM]
    assert got == want
    assert want["tool_calls"][0].model_dump() == {
        "id": "w1",
        "name": "get_weather",
        "arguments": {"city": "Paris"},
        "result": "sunny, 21°C",
        "error": None,
    }
    assert (want["input"], want["output"]) == (
        "What's the weather in Paris?",
        "It is sunny and 21°C in Paris.",
    )


def test_a_llamaindex_call_of_a_tool_the_agent_does_not_have_imports_as_a_failed_call(
    spans_file: Path, tmp_path: Path
) -> None:
    # LlamaIndex answers it itself ("Tool get_forecast not found. ..."), runs no tool and
    # marks no error in the tool message the model is shown: the import had a call that
    # worked (tool_failures 1.0), the adapter a failed one (0.75)
    def forecast_first(messages: list[ChatMessage], **_: object) -> ChatMessage:
        shown = sum(1 for m in messages if m.role == MessageRole.TOOL)
        if shown == 2:
            return ChatMessage(role=MessageRole.ASSISTANT, content="It is sunny and 21°C in Paris.")
        name, call_id = [("get_forecast", "f1"), ("get_weather", "w1")][shown]
        call = ToolCallBlock(tool_call_id=call_id, tool_name=name, tool_kwargs={"city": "Paris"})
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])

    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(weather, name="get_weather")],
        llm=MockFunctionCallingLLM(response_generator=forecast_first),
    )
    _, ours, theirs = llamaindex_both_ways(agent, spans_file, tmp_path)
    unknown = "Tool get_forecast not found. Please select a tool that is available."
    for trace in (ours, theirs):
        assert [
            (s.tool_call.model_dump(), s.attributes.get("agenteval.tool.not_run"))
            for s in trace.spans_of(SpanKind.TOOL)
            if s.tool_call is not None
        ] == [
            (
                {
                    "id": "f1",
                    "name": "get_forecast",
                    "arguments": {"city": "Paris"},
                    "result": unknown,
                    "error": unknown,
                },
                True,
            ),
            (
                {
                    "id": "w1",
                    "name": "get_weather",
                    "arguments": {"city": "Paris"},
                    "result": "sunny, 21°C",
                    "error": None,
                },
                None,
            ),
        ]
        assert ToolFailures().measure(trace).score == pytest.approx(0.75)  # 1 - 1 / (2 × 2)
    assert theirs.output == ours.output == "It is sunny and 21°C in Paris."


def test_a_llamaindex_react_agent_answers_with_its_answer(spans_file: Path, tmp_path: Path) -> None:
    # OpenInference writes the run's StopEvent as a repr cut at 200 characters, so the import
    # took the last model call's text: a ReAct agent's "Thought: ... Answer: ..." where the
    # adapter records the answer (coherence 0.406 against 0.637)
    replies = iter(
        [
            'Thought: I need the weather.\nAction: get_weather\nAction Input: {"city": "Paris"}',
            "Thought: I can answer without using any more tools.\nAnswer: It is sunny in Paris.",
        ]
    )
    agent = ReActAgent(
        tools=[FunctionTool.from_defaults(weather, name="get_weather")],
        llm=MockFunctionCallingLLM(
            response_generator=lambda messages, **_: ChatMessage(
                role=MessageRole.ASSISTANT, content=next(replies)
            )
        ),
    )
    _, ours, theirs = llamaindex_both_ways(agent, spans_file, tmp_path)
    for trace in (ours, theirs):
        assert (trace.input, trace.output, trace.status) == (
            "What's the weather in Paris?",
            "It is sunny in Paris.",
            RunStatus.OK,
        )
        assert [(c.name, c.arguments, c.result) for c in trace.tool_calls()] == [
            ("get_weather", {"city": "Paris"}, "sunny, 21°C")
        ]


@pytest.mark.parametrize("shaped", [True, False], ids=["shaped", "not-shaped"])
def test_a_llamaindex_agent_with_an_output_class_answers_as_the_adapter_records_it(
    shaped: bool, spans_file: Path, tmp_path: Path
) -> None:
    # FunctionAgent(output_cls=...) asks a StructuredLLM, after the agent's last call, to
    # shape the answer: its schema offered as a tool. The import answered with that call's
    # text ("" when the model did not shape it, and coherence scored "") and counted the
    # schema as a tool the agent called
    from pydantic import BaseModel

    class Weather(BaseModel):
        city: str
        summary: str

    answer = '{"city": "Paris", "summary": "Sunny and 21°C."}'
    calls: list[int] = []

    def reply(messages: list[ChatMessage], **_: object) -> ChatMessage:
        calls.append(1)
        if len(calls) == 1:
            return scripted_llm(messages)
        if len(calls) == 2:
            return ChatMessage(role=MessageRole.ASSISTANT, content=answer)
        fields = {"city": "Paris", "summary": "Sunny and 21°C."}
        block = ToolCallBlock(tool_call_id="s1", tool_name="Weather", tool_kwargs=fields)
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block] if shaped else [])

    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(weather, name="get_weather")],
        llm=MockFunctionCallingLLM(response_generator=reply),
        output_cls=Weather,
    )
    with warnings.catch_warnings():  # LlamaIndex warns when the model did not shape it
        warnings.simplefilter("ignore", UserWarning)
        result, ours, theirs = llamaindex_both_ways(agent, spans_file, tmp_path)
    assert result.structured_response == (
        {"city": "Paris", "summary": "Sunny and 21°C."} if shaped else None
    )
    for trace in (ours, theirs):
        assert (trace.input, trace.output, trace.status) == (
            "What's the weather in Paris?",
            answer,
            RunStatus.OK,
        )
        assert [c.name for c in trace.tool_calls()] == ["get_weather"]


def test_llamaindex_runs_that_wait_for_a_human_import_as_the_adapter_records_them(
    spans_file: Path, tmp_path: Path
) -> None:
    # OpenInference writes the tool call suspended by ctx.wait_for_event as a failed call
    # (WaitingForEvent), with the Context LlamaIndex passed the tool among its arguments,
    # and a run cancelled (to resume later, or not at all) without an error: imported, a
    # call that never failed counted as a failure, and stopped runs were "ok"; a workflow
    # whose step asked a human was "cancelled", its input the broker's state
    # (init_state), its answer a StopEvent's repr
    async def approved() -> None:
        await answered_at_once(refund_agent().run("Refund A-1"))

    async def paused_then_resumed() -> None:
        agent = refund_agent()
        await resume(agent, await saved_when_it_asks(agent.run("Refund A-2")))

    async def cancelled() -> None:
        handler = refund_agent().run("Refund A-3")
        async for _ in handler.stream_events():
            await handler.cancel_run()  # the caller gives up before the model answers
            break
        with pytest.raises(WorkflowCancelledByUser):
            await handler

    async def steps_paused_then_resumed() -> None:
        workflow = ApproveRefund(timeout=10)
        await resume(workflow, await saved_when_it_asks(workflow.run(order="A-4")))

    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        instrumented = instrument(evaluator)
        try:
            for run in (approved, paused_then_resumed, cancelled, steps_paused_then_resumed):
                asyncio.run(run())
            ours = evaluator.captured()
        finally:
            instrumented.uninstrument()
    theirs = import_otlp(spans_file)

    def said(trace: Trace) -> tuple[Any, ...]:
        calls = [(c.name, c.arguments, c.result, c.error) for c in trace.tool_calls()]
        return (trace.input, trace.output, trace.status, trace.error, calls)

    # a workflow of steps: OpenInference writes its start event and the human's answer as
    # reprs without their fields (StartEvent(), HumanResponseEvent()), so neither its
    # request nor the answer it resumed with is in the spans: no input, where the adapter
    # has both; its answer, a StopEvent's repr, reads back as the result
    assert [(t.input, t.metadata) for t in ours[4:]] == [
        ({"order": "A-4"}, {}),
        ("yes", {"resume": "yes"}),
    ]
    for trace in ours[4:]:
        trace.input = None
    assert [said(t) for t in theirs] == [said(t) for t in ours]

    def refunded(order: str) -> list[tuple[Any, ...]]:
        return [("refund_once_approved", {"order_id": order}, "refunded", None)]

    assert [said(t) for t in theirs] == [
        ("Refund A-1", "Refunded.", RunStatus.OK, None, refunded("A-1")),
        ("Refund A-2", None, RunStatus.INTERRUPTED, None, []),
        ("Refund A-2", "Refunded.", RunStatus.OK, None, refunded("A-2")),
        ("Refund A-3", None, RunStatus.CANCELLED, None, []),
        (None, None, RunStatus.INTERRUPTED, None, []),
        (None, "Refunded.", RunStatus.OK, None, []),
    ]
    # of a tool's wait, OpenInference keeps no prefix the run asked the human with
    assert [t.status_reason for t in theirs[1:5]] == [
        "waiting for HumanResponseEvent",
        None,
        "cancelled by its caller",
        "waiting for a response to InputRequiredEvent: Refund A-4?",
    ]
    assert [t.status_reason for t in ours[1:4:2]] == [
        "waiting for HumanResponseEvent: Refund A-2?",
        "cancelled by its caller",
    ]


def test_a_llamaindex_query_engine_on_a_completion_model(spans_file: Path, tmp_path: Path) -> None:
    # OpenInference records the completion as an LLM span with llm.prompts (no messages):
    # it imported as a chain, so the run had no model call, tokens or finish reason
    model = CompletionModel(finish_reason="length")
    engine = orders_index().as_query_engine(llm=model)  # its index is built (spans) here too
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        instrumented = instrument(evaluator)
        try:
            engine.query("When did A-1 ship?")
            [ours] = evaluator.captured()
        finally:
            instrumented.uninstrument()
    # building the index (its documents split into nodes, their embeddings) is no run: it
    # imported as two "ok" agent runs, which coherence passed (0.925 on the node reprs, and
    # 1.0 assumed for the embeddings' empty answer)
    [theirs] = import_otlp(spans_file)
    want, got = view(ours), view(theirs)
    # OpenInference makes the retriever's private _retrieve a retrieval span of its own
    assert want.pop("kinds") == [SpanKind.AGENT, SpanKind.RETRIEVER, SpanKind.LLM]
    assert got.pop("kinds") == [
        SpanKind.AGENT,
        SpanKind.RETRIEVER,
        SpanKind.RETRIEVER,
        SpanKind.LLM,
    ]
    assert got == want
    assert (want["input"], want["output"], want["status"]) == (
        "When did A-1 ship?",
        "A-1 shipped on Monday.",
        RunStatus.LIMIT,
    )
    assert want["model_calls"] == [("A-1 shipped on Monday.", [], 57, 7)]
    [prompt] = model.prompts
    assert [s.input for s in ours.spans_of(SpanKind.LLM)] == [prompt]
    assert [s.input for s in theirs.spans_of(SpanKind.LLM)] == [prompt]
    # the documents retrieved, as the adapter records them (OpenInference's private
    # _retrieve span, the second, has none of its own)
    [found] = ours.spans_of(SpanKind.RETRIEVER)
    retrieve, _ = theirs.spans_of(SpanKind.RETRIEVER)
    assert (retrieve.input, retrieve.output) == (found.input, found.output)


def test_functional_api_tasks_import_with_the_steps_the_adapter_gives(
    spans_file: Path, tmp_path: Path
) -> None:
    # LangGraph leaves a functional-API task its entrypoint's step: imported, three tasks
    # polling one job were side by side (tool_call_loops 1.0, where the adapter saw the
    # loop); tasks on other input are side by side, one redone is a step later
    jobs = jobs_checked_at_once()
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        for names in (["J1", "J2", "J3"], ["J1", "J1", "J1"]):
            jobs.invoke(names, {"callbacks": [AgentEvalCallbackHandler(evaluator)]})
        ours = evaluator.captured()
    theirs = import_otlp(spans_file)
    for want, got, steps in zip(ours, theirs, ([0, 0, 0], [0, 1, 2]), strict=True):
        assert_job_checks_stepped(want, steps)
        assert_job_checks_stepped(got, steps)


def test_a_functional_api_task_run_again_by_its_retry_policy_imports_as_one_call(
    spans_file: Path, tmp_path: Path
) -> None:
    # imported, each run again of the task was a step later: three fetches, two failed
    read = flaky_fetch(2)
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        read.invoke("a", {"callbacks": [AgentEvalCallbackHandler(evaluator)]})
        [ours] = evaluator.captured()
    [theirs] = import_otlp(spans_file)
    assert_fetched_once(ours, 2)
    # OpenInference records a one-argument tool's input as its value alone
    assert_fetched_once(theirs, 2, {"input": "a"})


@pytest.mark.parametrize("by_arguments", [False, True])
def test_a_langgraph_functional_api_agent(
    spans_file: Path, tmp_path: Path, by_arguments: bool
) -> None:
    # its tool calls run as concurrent tasks and LangChain passed each tool the only
    # argument's value: the import paired the calls with the wrong requests (arguments and
    # errors swapped), and made the handled error's call a third, unrun call. Run in one
    # task, each tool given the arguments alone, they import as the adapter records them
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        functional_agent(by_arguments).invoke(
            [{"role": "user", "content": "Where are A-1 and Z-9?"}],
            {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
        )
        [ours] = evaluator.captured()
    [theirs] = import_otlp(spans_file)
    want, got = view(ours), view(theirs)
    # OpenInference makes a span named "agent" (here the entrypoint's) an agent span
    assert want.pop("kinds") == [
        SpanKind.AGENT,
        SpanKind.LLM,
        SpanKind.TOOL,
        SpanKind.TOOL,
        SpanKind.LLM,
    ]
    assert got.pop("kinds") == [
        SpanKind.AGENT,
        SpanKind.AGENT,
        SpanKind.LLM,
        SpanKind.TOOL,
        SpanKind.TOOL,
        SpanKind.LLM,
    ]
    assert got == want
    assert sorted((c.id, c.arguments, c.result, c.error) for c in want["tool_calls"]) == [
        ("c1", {"order_id": "A-1"}, "shipped", None),
        ("c2", {"order_id": "Z-9"}, "Error: no order Z-9", "ValueError: no order Z-9"),
    ]
    assert (want["input"], want["output"]) == (
        "Where are A-1 and Z-9?",
        "A-1 has shipped; I could not find order Z-9.",
    )


@pytest.mark.parametrize(
    ("inputs", "request_", "session"),
    [
        (None, "Where is A-1?", None),  # no inputs: the first task's description, the crew's id
        ({"session_id": "user-7", "order": "A-1"}, {"order": "A-1"}, "user-7"),
    ],
    ids=["without-inputs", "with-inputs"],
)
def test_a_crewai_kickoff_imports_with_its_request_answer_and_session(
    inputs: dict[str, str] | None,
    request_: object,
    session: str | None,
    spans_file: Path,
    tmp_path: Path,
) -> None:
    # OpenInference writes a crew's kickoff with the inputs it was given (the session key
    # among them), its tasks, and its CrewOutput whole: the import had no request (or the
    # session key as part of it), the CrewOutput's JSON with every message as the answer,
    # no session, and coherence assumed 1.0 ("empty input") for a crew without inputs
    from agenteval_crewai import AgentEvalListener
    from crewai.tools import tool as crew_tool
    from test_crewai_fidelity import one_call_crew

    from agenteval_core.metrics import Coherence, ToolFailures

    @crew_tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        return f"{order_id} shipped"

    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        listener = AgentEvalListener(evaluator)
        crew = one_call_crew(lookup_order, "A-1 has shipped")
        crew.kickoff(inputs=inputs)
        assert listener.flush(20)
        [ours] = evaluator.captured()
    [theirs] = import_otlp(spans_file)
    expected = (request_, "A-1 has shipped", session or str(crew.id), RunStatus.OK)
    assert (ours.input, ours.output, ours.session_id, ours.status) == expected
    assert (theirs.input, theirs.output, theirs.session_id, theirs.status) == expected
    # its spans hold no model or tool call: the tool metrics skip the run, as they do
    # OpenLLMetry's CrewAI runs
    assert not theirs.steps_recorded
    assert ToolFailures().measure(theirs).skipped
    coherence = Coherence()
    exclude = {"latency_ms", "trace_id", "case_id", "session_id"}
    assert coherence.measure(theirs).model_dump(exclude=exclude) == coherence.measure(
        ours
    ).model_dump(exclude=exclude)


def classic_executor(kind: str) -> Any:
    """A langchain-classic ``AgentExecutor`` asked "Where is A-1?": "limit", a tool-calling
    agent stopped at ``max_iterations=2`` (it answers "Agent stopped due to max
    iterations."); "react", a ReAct agent on a completion model whose first reply does not
    parse (the executor runs its ``_Exception`` "tool" with the parsing error), which then
    looks A-1 up and answers "A-1 has shipped."."""
    from langchain_classic.agents import (
        AgentExecutor,
        create_react_agent,
        create_tool_calling_agent,
    )
    from langchain_core.language_models.fake import FakeListLLM
    from langchain_core.prompts import ChatPromptTemplate, PromptTemplate

    @tool
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        return "shipped"

    if kind == "limit":
        asks = [
            AIMessage("", tool_calls=[tool_call("lookup_order", f"c{i}", order_id="A-1")])
            for i in range(3)
        ]
        prompt = ChatPromptTemplate.from_messages(
            [("human", "{input}"), ("placeholder", "{agent_scratchpad}")]
        )
        agent = create_tool_calling_agent(ScriptedChatModel(replies=asks), [lookup_order], prompt)
        return AgentExecutor(agent=agent, tools=[lookup_order], max_iterations=2)
    model = FakeListLLM(
        responses=[
            "I think it shipped",
            "Thought: check it\nAction: lookup_order\nAction Input: A-1",
            "Thought: done\nFinal Answer: A-1 has shipped.",
        ]
    )
    prompt = PromptTemplate.from_template(
        "Tools: {tools} ({tool_names})\nQuestion: {input}\n{agent_scratchpad}"
    )
    agent = create_react_agent(model, [lookup_order], prompt)
    return AgentExecutor(agent=agent, tools=[lookup_order], handle_parsing_errors=True)


CLASSIC_RUNS = {
    # kind: (answer, status, status_reason, the tool calls' names)
    "limit": (
        "Agent stopped due to max iterations.",
        RunStatus.LIMIT,
        "Agent stopped due to max iterations.",
        ["lookup_order", "lookup_order"],
    ),
    "react": ("A-1 has shipped.", RunStatus.OK, None, ["lookup_order"]),
}


@pytest.mark.parametrize("kind", sorted(CLASSIC_RUNS))
def test_a_classic_agent_executor_run_imports_as_the_handler_captures_it(
    kind: str, spans_file: Path, tmp_path: Path
) -> None:
    # a run the executor stopped at max_iterations imported as "ok", and the "tool" it runs
    # on a reply that does not parse (_Exception) as a call of a tool the agent lacks, which
    # succeeded: the adapter records a limit, and no such call
    with OnlineEvaluator(capture=tmp_path / "ours.jsonl", log=False) as evaluator:
        classic_executor(kind).invoke(
            {"input": "Where is A-1?"}, {"callbacks": [AgentEvalCallbackHandler(evaluator)]}
        )
        [ours] = evaluator.captured()
    [theirs] = import_otlp(spans_file)
    for trace in (ours, theirs):
        assert_classic_run(trace, kind)


def assert_classic_run(trace: Trace, kind: str) -> None:
    """``trace`` is the run of :func:`classic_executor` ``kind`` (see CLASSIC_RUNS)."""
    answer, status, reason, calls = CLASSIC_RUNS[kind]
    assert (trace.input, trace.output, trace.status, trace.status_reason) == (
        "Where is A-1?",
        answer,
        status,
        reason,
    )
    assert [c.name for c in trace.tool_calls()] == calls
