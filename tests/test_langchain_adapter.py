"""The LangChain / LangGraph adapter, driven by real agent loops with a scripted chat model."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agenteval_langchain import (
    AgentEvalCallbackHandler,
    AgentLoopError,
    AsyncAgentEvalCallbackHandler,
)
from agenteval_langchain._scripted import ScriptedChatModel, tool_call
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import StructuredTool, ToolException, tool
from langgraph.prebuilt import ToolNode, create_react_agent

from agenteval_core import (
    DEFAULT_SESSION_METRICS,
    LoopAlert,
    OnlineEvaluator,
    RunStatus,
    SpanKind,
    ToolCall,
    Trace,
    TraceResults,
    default_metric_names,
    read_capture,
)

ORDERS = {"A-1": "shipped", "A-2": "processing"}


@tool
def lookup_order(order_id: str) -> str:
    """Status of an order by id."""
    if order_id not in ORDERS:
        raise ValueError(f"no order {order_id}")
    return ORDERS[order_id]


@tool
def refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order."""
    return f"refunded {amount} on {order_id}"


def two_tool_script() -> list[AIMessage]:
    return [
        AIMessage(
            content="Let me look the order up.",
            tool_calls=[tool_call("lookup_order", "call-1", order_id="A-1")],
            usage_metadata={"input_tokens": 20, "output_tokens": 5, "total_tokens": 25},
        ),
        AIMessage(
            content="Refunding.",
            tool_calls=[tool_call("refund", "call-2", order_id="A-1", amount=5.0)],
        ),
        AIMessage(content="Order A-1 has shipped and I refunded 5.0."),
    ]


@pytest.fixture
def evaluator(tmp_path: Path) -> Any:
    alerts: list[LoopAlert] = []
    results: list[TraceResults] = []
    ev = OnlineEvaluator(
        capture=tmp_path / "capture.jsonl",
        on_alert=alerts.append,
        on_result=lambda trace, outcome: results.append(outcome),
    )
    ev.alerts, ev.results = alerts, results  # type: ignore[attr-defined]
    yield ev
    ev.close()


@pytest.mark.parametrize(
    "builder", [create_agent, create_react_agent], ids=["create_agent", "create_react_agent"]
)
def test_agent_run_becomes_a_trace(evaluator: OnlineEvaluator, builder: Any) -> None:
    agent = builder(ScriptedChatModel(replies=two_tool_script()), tools=[lookup_order, refund])
    handler = AgentEvalCallbackHandler(evaluator)
    agent.invoke(
        {"messages": [("user", "Where is A-1? Refund 5.")]},
        config={"callbacks": [handler], "configurable": {"thread_id": "thread-7"}},
    )
    [trace] = evaluator.captured()
    assert trace.input == "Where is A-1? Refund 5."
    assert trace.output == "Order A-1 has shipped and I refunded 5.0."
    assert trace.session_id == "thread-7" and trace.framework == "langchain"
    root = trace.spans[0]
    assert root.kind is SpanKind.AGENT and root.parent_id is None
    by_id = {span.id: span for span in trace.spans}
    assert all(span.parent_id in by_id for span in trace.spans[1:])
    calls = trace.tool_calls()
    assert [(c.id, c.name, c.arguments, c.result) for c in calls] == [
        ("call-1", "lookup_order", {"order_id": "A-1"}, "shipped"),
        ("call-2", "refund", {"order_id": "A-1", "amount": 5.0}, "refunded 5.0 on A-1"),
    ]
    llms = trace.spans_of(SpanKind.LLM)
    assert len(llms) == 3
    assert [c.id for c in llms[0].requested_tool_calls] == ["call-1"]  # linked by tool call id
    assert llms[0].thought == "Let me look the order up."
    assert llms[0].attributes["gen_ai.request.model"] == "scripted-model"
    assert trace.token_usage() == {"input_tokens": 20, "output_tokens": 5}
    assert {t.name for t in trace.tools} == {"lookup_order", "refund"}
    assert (
        trace.tools[0].parameters is not None
        and "order_id" in trace.tools[0].parameters["properties"]
    )
    steps = trace.steps()
    assert [[c.name for c in s.tool_calls] for s in steps] == [["lookup_order"], ["refund"], []]


def test_tool_that_raises_is_captured_with_its_error(evaluator: OnlineEvaluator) -> None:
    # unhandled: on_tool_error, then the run fails at the root; both are in the trace
    script = [AIMessage(content="", tool_calls=[tool_call("lookup_order", "bad", order_id="Z-9")])]
    agent = create_agent(ScriptedChatModel(replies=script), tools=[lookup_order])
    with pytest.raises(ValueError, match="no order Z-9"):
        agent.invoke(
            {"messages": [("user", "Where is Z-9?")]},
            config={"callbacks": [AgentEvalCallbackHandler(evaluator)]},
        )
    [trace] = evaluator.captured()
    [call] = trace.tool_calls()
    assert call.name == "lookup_order" and call.failed and call.id == "bad"
    assert call.error == "ValueError: no order Z-9"
    assert trace.error == "ValueError: no order Z-9"


def test_handled_tool_error_is_captured_as_an_error(evaluator: OnlineEvaluator) -> None:
    @tool
    def flaky(order_id: str) -> str:
        """Fails the way a remote tool does."""
        raise ToolException(f"service unavailable for {order_id}")

    flaky.handle_tool_error = True
    script = [
        AIMessage(content="", tool_calls=[tool_call("flaky", "f1", order_id="A-1")]),
        AIMessage(content="The service is down, try later."),
    ]
    agent = create_agent(ScriptedChatModel(replies=script), tools=[flaky])
    agent.invoke(
        {"messages": [("user", "A-1?")]},
        config={"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    [call] = trace.tool_calls()
    assert call.error == "service unavailable for A-1" and call.failed
    assert trace.error is None and trace.output == "The service is down, try later."


def test_an_error_the_graph_handled_has_the_text_the_model_saw(
    evaluator: OnlineEvaluator,
) -> None:
    # ToolNode(handle_tool_errors=True) turns any exception into a message for the model;
    # the tool run itself ended with on_tool_error
    script = [
        AIMessage(content="", tool_calls=[tool_call("lookup_order", "z", order_id="Z-9")]),
        AIMessage(content="There is no order Z-9."),
    ]
    agent = create_react_agent(
        ScriptedChatModel(replies=script), ToolNode([lookup_order], handle_tool_errors=True)
    )
    agent.invoke(
        {"messages": [("user", "Where is Z-9?")]},
        config={"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    [call] = trace.tool_calls()
    seen = "Error: ValueError('no order Z-9')\n Please fix your mistakes."
    # it was: result None, although the model answered from this text
    assert (call.id, call.result, call.error) == ("z", seen, "ValueError: no order Z-9")
    assert trace.spans_of(SpanKind.TOOL)[0].output == seen
    assert (trace.status, trace.output) == (RunStatus.OK, "There is no order Z-9.")


def test_run_that_errors_at_the_root_is_captured(evaluator: OnlineEvaluator) -> None:
    def explode(messages: Sequence[BaseMessage]) -> AIMessage:
        raise ConnectionError("model endpoint down")

    agent = create_agent(ScriptedChatModel(reply=explode), tools=[lookup_order])
    with pytest.raises(ConnectionError):
        agent.invoke(
            {"messages": [("user", "hi")]},
            config={"callbacks": [AgentEvalCallbackHandler(evaluator)]},
        )
    [trace] = evaluator.captured()
    assert trace.error == "ConnectionError: model endpoint down"
    assert trace.spans_of(SpanKind.LLM)[0].error == "ConnectionError: model endpoint down"


def test_async_and_streaming_runs(evaluator: OnlineEvaluator) -> None:
    agent = create_agent(ScriptedChatModel(replies=two_tool_script()), tools=[lookup_order, refund])
    handler = AsyncAgentEvalCallbackHandler(evaluator, session_id="async-session")

    async def main() -> None:
        await agent.ainvoke({"messages": [("user", "async run")]}, config={"callbacks": [handler]})
        async for _ in agent.astream(
            {"messages": [("user", "streamed run")]}, config={"callbacks": [handler]}
        ):
            pass

    asyncio.run(main())
    traces = evaluator.captured()
    assert sorted(t.input for t in traces) == ["async run", "streamed run"]
    assert all(t.session_id == "async-session" and len(t.tool_calls()) == 2 for t in traces)


def test_a_run_its_caller_stopped_is_cancelled_not_failed(evaluator: OnlineEvaluator) -> None:
    # a timeout around the run (or a client gone) cancels its task inside a tool call; a
    # web server stops reading a stream after its first chunk. Neither is the agent's error.
    started, release = threading.Event(), threading.Event()

    @tool
    def wait_for_approval(order_id: str) -> str:
        """Wait for a human to approve a refund."""
        started.set()
        release.wait(30)
        return "approved"

    approval = [
        AIMessage(content="", tool_calls=[tool_call("wait_for_approval", "w1", order_id="A-1")])
    ]
    handler = AsyncAgentEvalCallbackHandler(evaluator, session_id="s-cancel")

    async def cancel_inside_the_tool() -> None:
        agent = create_agent(ScriptedChatModel(replies=approval), tools=[wait_for_approval])
        run = asyncio.ensure_future(
            agent.ainvoke({"messages": [("user", "Refund A-1")]}, config={"callbacks": [handler]})
        )
        assert await asyncio.to_thread(started.wait, 30)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        release.set()  # the sync tool's thread returns after its run ended

    try:
        asyncio.run(cancel_inside_the_tool())  # waits for that thread
    finally:
        release.set()
    agent = create_agent(ScriptedChatModel(replies=two_tool_script()), tools=[lookup_order, refund])
    stream = agent.stream(
        {"messages": [("user", "Where is A-1?")]},
        config={"callbacks": [AgentEvalCallbackHandler(evaluator, session_id="s-stream")]},
    )
    assert list(next(stream)) == ["model"]
    stream.close()
    assert evaluator.flush(10)
    cancelled, abandoned = sorted(evaluator.captured(), key=lambda t: t.session_id or "")
    assert (cancelled.input, cancelled.status, cancelled.status_reason, cancelled.error) == (
        "Refund A-1",
        RunStatus.CANCELLED,
        "cancelled by its caller",
        "CancelledError",
    )
    assert not cancelled.completed and cancelled.output is None
    # the call in flight: its one record says it never returned
    [call] = cancelled.tool_calls()
    assert (call.id, call.name, call.arguments, call.result, call.error) == (
        "w1",
        "wait_for_approval",
        {"order_id": "A-1"},
        None,
        "not ended before its run ended",
    )
    assert call.failed
    assert (abandoned.input, abandoned.status, abandoned.status_reason, abandoned.error) == (
        "Where is A-1?",
        RunStatus.CANCELLED,
        "cancelled by its caller",
        "GeneratorExit",
    )
    assert abandoned.tool_calls() == []  # stopped after the model's first reply
    stats = evaluator.stats
    assert (stats.submitted, stats.captured, stats.scored) == (2, 2, 2)


def run_view(trace: Trace) -> dict[str, Any]:
    """What a run did, span by span (not ids or times)."""
    return {
        "io": (trace.input, trace.output, trace.status, trace.session_id),
        "spans": [(s.kind, s.name) for s in trace.spans],
        "requested": [
            [(c.id, c.name, c.arguments) for c in s.requested_tool_calls]
            for s in trace.spans_of(SpanKind.LLM)
        ],
        "calls": trace.tool_calls(),
        "tokens": trace.token_usage(),
    }


@pytest.mark.parametrize("handler_kind", ["sync", "async"])
@pytest.mark.parametrize("entry", ["invoke", "ainvoke", "stream", "astream"])
def test_every_entry_point_and_handler_give_the_same_trace(
    evaluator: OnlineEvaluator, handler_kind: str, entry: str
) -> None:
    agent = create_agent(ScriptedChatModel(replies=two_tool_script()), tools=[lookup_order, refund])
    kind = AgentEvalCallbackHandler if handler_kind == "sync" else AsyncAgentEvalCallbackHandler
    config: Any = {"callbacks": [kind(evaluator, session_id="s")]}
    request = {"messages": [("user", "Where is A-1? Refund 5.")]}

    async def run_async() -> None:
        if entry == "ainvoke":
            await agent.ainvoke(request, config=config)
        else:
            async for _ in agent.astream(request, config=config):
                pass

    if entry == "invoke":
        agent.invoke(request, config=config)
    elif entry == "stream":
        for _ in agent.stream(request, config=config):
            pass
    else:
        asyncio.run(run_async())
    [trace] = evaluator.captured()
    assert run_view(trace) == {
        "io": (
            "Where is A-1? Refund 5.",
            "Order A-1 has shipped and I refunded 5.0.",
            RunStatus.OK,
            "s",
        ),
        "spans": [
            (SpanKind.AGENT, "LangGraph"),
            (SpanKind.CHAIN, "model"),
            (SpanKind.LLM, "scripted-model"),
            (SpanKind.CHAIN, "tools"),
            (SpanKind.TOOL, "lookup_order"),
            (SpanKind.CHAIN, "model"),
            (SpanKind.LLM, "scripted-model"),
            (SpanKind.CHAIN, "tools"),
            (SpanKind.TOOL, "refund"),
            (SpanKind.CHAIN, "model"),
            (SpanKind.LLM, "scripted-model"),
        ],
        "requested": [
            [("call-1", "lookup_order", {"order_id": "A-1"})],
            [("call-2", "refund", {"order_id": "A-1", "amount": 5.0})],
            [],
        ],
        "calls": [
            ToolCall(
                id="call-1", name="lookup_order", arguments={"order_id": "A-1"}, result="shipped"
            ),
            ToolCall(
                id="call-2",
                name="refund",
                arguments={"order_id": "A-1", "amount": 5.0},
                result="refunded 5.0 on A-1",
            ),
        ],
        "tokens": {"input_tokens": 20, "output_tokens": 5},
    }


def test_concurrent_runs_in_threads_and_tasks_do_not_mix(evaluator: OnlineEvaluator) -> None:
    handler = AgentEvalCallbackHandler(evaluator)

    def reply_for(messages: Sequence[BaseMessage]) -> AIMessage:
        question = str(messages[0].content)
        order = question.split()[-1]
        if not any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage(
                content="", tool_calls=[tool_call("lookup_order", f"id-{order}", order_id=order)]
            )
        return AIMessage(content=f"answer for {order}")

    agent = create_agent(ScriptedChatModel(reply=reply_for), tools=[lookup_order])

    def run(order: str) -> None:
        agent.invoke(
            {"messages": [("user", f"status of {order}")]}, config={"callbacks": [handler]}
        )

    threads = [threading.Thread(target=run, args=(o,)) for o in ["A-1", "A-2"] * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    async def tasks() -> None:
        await asyncio.gather(
            *(
                agent.ainvoke(
                    {"messages": [("user", f"status of {o}")]}, config={"callbacks": [handler]}
                )
                for o in ["A-1", "A-2"] * 4
            )
        )

    asyncio.run(tasks())
    traces = evaluator.captured()
    assert len(traces) == 16
    for trace in traces:
        order = str(trace.input).split()[-1]
        [call] = trace.tool_calls()
        assert call.arguments == {"order_id": order} and call.id == f"id-{order}"
        assert trace.output == f"answer for {order}"


def looping_model(turns: int = 6) -> ScriptedChatModel:
    same = [
        AIMessage(content="", tool_calls=[tool_call("lookup_order", f"loop-{i}", order_id="A-2")])
        for i in range(turns)
    ]
    return ScriptedChatModel(replies=[*same, AIMessage(content="Still processing.")])


def test_loop_alert_fires_on_the_looping_run_only(evaluator: OnlineEvaluator) -> None:
    handler = AgentEvalCallbackHandler(evaluator, session_id="s")
    create_agent(ScriptedChatModel(replies=two_tool_script()), tools=[lookup_order, refund]).invoke(
        {"messages": [("user", "normal")]}, config={"callbacks": [handler]}
    )
    assert evaluator.flush(10)
    assert evaluator.alerts == []  # type: ignore[attr-defined]
    create_agent(looping_model(), tools=[lookup_order]).invoke(
        {"messages": [("user", "loop")]}, config={"callbacks": [handler]}
    )
    evaluator.captured()
    alerts = evaluator.alerts  # type: ignore[attr-defined]
    repeated = [a for a in alerts if a.pattern == "repeated_call"]
    assert len(repeated) == 1 and repeated[0].count == 3
    assert repeated[0].calls[0].arguments == {"order_id": "A-2"}


def test_guard_stops_the_looping_agent(evaluator: OnlineEvaluator) -> None:
    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=True)
    agent = create_agent(looping_model(), tools=[lookup_order])
    with pytest.raises(AgentLoopError, match="lookup_order called 3 times"):
        agent.invoke({"messages": [("user", "loop")]}, config={"callbacks": [handler]})
    [trace] = evaluator.captured()
    assert len(trace.tool_calls()) == 3  # the third identical call was refused before it ran
    assert "AgentLoopError" in (trace.error or "")
    assert evaluator.alerts[0].pattern == "repeated_call"  # type: ignore[attr-defined]
    # a normal run through the same guarded handler is untouched
    create_agent(ScriptedChatModel(replies=two_tool_script()), tools=[lookup_order, refund]).invoke(
        {"messages": [("user", "normal")]}, config={"callbacks": [handler]}
    )
    assert len(evaluator.captured()) == 2


@pytest.mark.parametrize("tool_kind", ["sync", "async"])
def test_the_async_handler_stops_a_loop_whatever_the_tools(
    tool_kind: str, evaluator: OnlineEvaluator
) -> None:
    runs: list[str] = []

    def status(order_id: str) -> str:
        runs.append(order_id)
        return "processing"

    async def astatus(order_id: str) -> str:
        return status(order_id)

    looked_up = StructuredTool.from_function(
        func=status if tool_kind == "sync" else None,
        coroutine=astatus if tool_kind == "async" else None,
        name="lookup_order",
        description="Status of an order by id.",
    )
    handler = AsyncAgentEvalCallbackHandler(evaluator, stop_on_loop=True)
    agent = create_agent(looping_model(), tools=[looked_up])

    async def run() -> None:
        await agent.ainvoke({"messages": [("user", "loop")]}, config={"callbacks": [handler]})

    with pytest.raises(AgentLoopError, match="lookup_order called 3 times"):
        asyncio.run(run())
    assert runs == ["A-2", "A-2"]  # the third identical call was refused before it ran
    [trace] = evaluator.captured()
    assert trace.status is RunStatus.STOPPED and len(trace.tool_calls()) == 3


def test_handler_never_raises_when_evaluation_fails(tmp_path: Path) -> None:
    def broken_sink(trace: Trace, results: TraceResults) -> None:
        raise RuntimeError("sink down")

    evaluator = OnlineEvaluator(capture=tmp_path / "c.jsonl", on_result=broken_sink)
    handler = AgentEvalCallbackHandler(evaluator)
    handler._translator.assembler._finish = lambda *args, **kwargs: 1 / 0  # type: ignore[method-assign]
    agent = create_agent(ScriptedChatModel(replies=two_tool_script()), tools=[lookup_order, refund])
    result = agent.invoke({"messages": [("user", "go")]}, config={"callbacks": [handler]})
    assert result["messages"][-1].content == "Order A-1 has shipped and I refunded 5.0."
    assert evaluator.recorder.flush(10) and evaluator.recorder.pump.errors >= 1
    evaluator.close()


def test_a_run_going_at_close_is_captured_as_it_stood_and_one_after_is_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # an agent thread still running when the evaluator is closed (the exit hook, a server
    # shutting down, a `with` block left early): the run was lost whole, the model call it
    # had made included. It is now captured as it stood; what it does after close adds
    # nothing, and a whole run after close is counted, never silent
    results = tmp_path / "r.jsonl"
    evaluator = OnlineEvaluator(capture=tmp_path / "c.jsonl", results_path=results, log=False)
    handler = AgentEvalCallbackHandler(evaluator, session_id="s1")
    in_tool, release = threading.Event(), threading.Event()

    @tool
    def slow_lookup(order_id: str) -> str:
        """Status of an order by id."""
        in_tool.set()
        release.wait(10)
        return "shipped"

    script = [
        AIMessage(content="", tool_calls=[tool_call("slow_lookup", "c1", order_id="A-1")]),
        AIMessage(content="A-1 has shipped."),
    ]
    replies: list[str] = []

    def run() -> None:
        agent = create_agent(ScriptedChatModel(replies=script), tools=[slow_lookup])
        result = agent.invoke({"messages": [("user", "Where is A-1?")]}, {"callbacks": [handler]})
        replies.append(result["messages"][-1].content)

    agent_thread = threading.Thread(target=run)
    agent_thread.start()
    assert in_tool.wait(10)
    with caplog.at_level("WARNING", logger="agenteval"):
        evaluator.close()
        release.set()
        agent_thread.join(10)
        run()  # a whole run after close
    assert replies == ["A-1 has shipped.", "A-1 has shipped."]  # the agent never noticed
    [trace] = read_capture(tmp_path / "c.jsonl")
    reason = "still running when the evaluator closed: recorded as it stood"
    assert (trace.status, trace.status_reason, trace.error, trace.output) == (
        RunStatus.UNFINISHED,
        reason,
        None,
        None,
    )
    assert (trace.input, trace.session_id) == ("Where is A-1?", "s1")
    assert [(s.kind, s.name, s.error) for s in trace.spans] == [
        (SpanKind.AGENT, "LangGraph", None),
        (SpanKind.CHAIN, "model", None),
        (SpanKind.LLM, "scripted-model", None),
        (SpanKind.CHAIN, "tools", reason),
        (SpanKind.TOOL, "slow_lookup", reason),
    ]
    [asked] = trace.spans_of(SpanKind.LLM)[0].requested_tool_calls
    assert (asked.id, asked.name, asked.arguments) == ("c1", "slow_lookup", {"order_id": "A-1"})
    assert [(c.id, c.arguments, c.result, c.error) for c in trace.tool_calls()] == [
        ("c1", {"order_id": "A-1"}, None, reason)
    ]
    # not scored: how it would have ended, and scored, is unknown
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    [scored] = [line for line in lines if line.get("trace_id") == trace.id]
    [session] = [
        line for line in lines if line.get("session_id") == "s1" and "trace_id" not in line
    ]
    # nor a failure of its session: the session metrics found nothing to evaluate
    assert [
        (r["name"], r["score"], r["metadata"]["traces_evaluated"])
        for r in session["session_results"]
    ] == [("agent_reliability", None, 0), ("agent_consistency", None, 0)]
    assert [(r["name"], r["score"], r["skipped"], r["reason"]) for r in scored["results"]] == [
        (
            name,
            None,
            True,
            f"not scored: how the run ended was not recorded ({reason})",
        )
        for name in default_metric_names()
        if name not in DEFAULT_SESSION_METRICS
    ]
    stats = evaluator.stats
    assert (stats.submitted, stats.captured, stats.capture_errors) == (2, 1, 1)
    assert (stats.scored, stats.dropped_from_scoring) == (1, 1)
    [late] = stats.uncaptured_trace_ids
    assert stats.unscored_trace_ids == [late] and late != trace.id
    assert evaluator.recorder.pump.errors == 0
    assert [r.getMessage() for r in caplog.records] == [
        "agenteval: 1 run(s) were still going when the evaluator closed: each is captured as "
        f"it stood, with status unfinished ({reason}), and not scored; what they do after "
        "this is not recorded. Close the evaluator after the agent's last run",
        f"agenteval: trace {late} finished after the evaluator was closed: neither captured "
        "nor scored (counted, with any later ones, in stats.capture_errors and "
        "stats.dropped_from_scoring); close the evaluator after the agent's last run",
    ]


def test_a_hundred_handlers_share_the_evaluators_one_thread(evaluator: OnlineEvaluator) -> None:
    # threads other tests left may end meanwhile: what counts is that none is added
    before = {thread.ident for thread in threading.enumerate()}
    handlers = [AgentEvalCallbackHandler(evaluator, session_id=f"user-{i}") for i in range(100)]
    assert {thread.ident for thread in threading.enumerate()} - before == set()  # none per handler
    agent = create_agent(ScriptedChatModel(replies=two_tool_script()), tools=[lookup_order, refund])
    for handler in handlers[:3]:  # a handler per invoke, as a web app would build them
        agent.invoke({"messages": [("user", "go")]}, config={"callbacks": [handler]})
    traces = evaluator.captured()
    assert [t.session_id for t in traces] == ["user-0", "user-1", "user-2"]
    assert {thread.ident for thread in threading.enumerate()} - before == set()


def test_a_loop_alert_reaches_the_terminal_with_the_one_line_handler(tmp_path: Path) -> None:
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        from agenteval_langchain import AgentEvalCallbackHandler
        from agenteval_langchain._scripted import ScriptedChatModel, tool_call
        from langchain.agents import create_agent
        from langchain_core.messages import AIMessage
        from langchain_core.tools import tool

        @tool
        def lookup_order(order_id: str) -> str:
            \"\"\"Status of an order.\"\"\"
            return "processing"

        replies = [
            AIMessage(content="", tool_calls=[tool_call("lookup_order", f"c{i}", order_id="A-2")])
            for i in range(4)
        ]
        agent = create_agent(
            ScriptedChatModel(replies=[*replies, AIMessage(content="Still processing.")]),
            tools=[lookup_order],
        )
        agent.invoke(
            {"messages": [("user", "Is A-2 ready?")]},
            config={"callbacks": [AgentEvalCallbackHandler(session_id="user-42")]},
        )
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # no logging set up by the user: the WARNING still reaches stderr, in one line
    alerts = [line for line in done.stderr.splitlines() if "loop alert" in line]
    assert alerts == [
        "agenteval loop alert (session user-42, trace "
        + alerts[0].split("trace ")[1].split(")")[0]
        + '): lookup_order called 3 times with the same arguments {"order_id": "A-2"}; '
        "the run goes on"
    ]
    assert (tmp_path / "agenteval-capture.jsonl").exists()
