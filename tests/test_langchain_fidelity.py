"""LangChain / LangGraph runs an evaluator must get right: requested calls with their
arguments, run metadata, the reported model, interrupts and resumes, structured output and
handoffs, each compared field by field with what the run did."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import operator
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain._scripted import ScriptedChatModel, tool_call
from judge_server import JudgeServer, Reply
from langchain.agents import create_agent
from langchain.agents.middleware import ModelCallLimitMiddleware, ToolCallLimitMiddleware
from langchain.agents.middleware.model_call_limit import ModelCallLimitExceededError
from langchain.agents.middleware.tool_call_limit import ToolCallLimitExceededError
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import NodeTimeoutError
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import create_react_agent
from langgraph.types import Command, Send, interrupt
from langgraph_agents import (
    ORDER_STATUS,
    Classifier,
    answered_by_its_tool,
    assert_fetched_once,
    flaky_fetch,
    functional_agent,
    handoff,
    job_status,
    lookup_order,
    orders_agent,
    retrying_agent,
    style_guide,
    summarisers_sent_at_once,
    supervised_team,
)
from pollers import TakingTurns, assert_each_poller_loops_alone
from pydantic import BaseModel

from agenteval_core import (
    GRAPH_STEP,
    GUARD_REFUSED,
    INTERNAL_CALL,
    PROVIDER_TOOL,
    REASONING,
    REFUSAL,
    TOOL_NOT_RUN,
    AgentStep,
    CallbackSink,
    EvalCase,
    OnlineEvaluator,
    RunStatus,
    Span,
    SpanKind,
    ToolCall,
    Trace,
    create_metric,
    default_embedder,
    read_capture,
    replay,
)
from agenteval_core.metrics import Coherence, ToolCallLoops, ToolFailures
from agenteval_core.metrics._judge_base import describe_trace


def test_requested_calls_carry_their_arguments_and_the_run_its_metadata(
    evaluator: OnlineEvaluator,
) -> None:
    script = [
        AIMessage(content="Looking.", tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")]),
        AIMessage(content="A-1 has shipped."),
    ]
    agent = create_agent(ScriptedChatModel(replies=script), tools=[lookup_order])
    agent.invoke(
        {"messages": [("user", "Where is A-1?")]},
        config={
            "callbacks": [AgentEvalCallbackHandler(evaluator)],
            "metadata": {"user_id": "u-7", "plan": "pro"},
            "tags": ["beta"],
            "configurable": {"thread_id": "t-1"},
        },
    )
    [trace] = evaluator.captured()
    first, second = trace.spans_of(SpanKind.LLM)
    assert [(c.id, c.name, c.arguments) for c in first.requested_tool_calls] == [
        ("c1", "lookup_order", {"order_id": "A-1"})
    ]
    assert second.requested_tool_calls == []
    [executed] = trace.tool_calls()
    assert (executed.id, executed.arguments) == ("c1", {"order_id": "A-1"})
    assert trace.metadata == {"user_id": "u-7", "plan": "pro", "thread_id": "t-1", "tags": ["beta"]}
    # the model name LangChain reports, not the chat model's class name
    assert first.name == "scripted-model"
    assert first.attributes["gen_ai.request.model"] == "scripted-model"
    assert (trace.status, trace.session_id) == (RunStatus.OK, "t-1")


@pytest.mark.parametrize("resumed_by", ["the same handler", "a handler per request", "elsewhere"])
def test_an_interrupt_pauses_the_run_and_the_resume_links_to_it(
    evaluator: OnlineEvaluator, tmp_path: Path, resumed_by: str
) -> None:
    # an app that makes a handler per request resumed with a handler that never saw the
    # pause, as a server process that did not serve it does: the resumed run's request was
    # the human's answer (coherence compared "approved" with the answer: a false failure)
    @tool
    def refund(order_id: str) -> str:
        """Refund an order once a human approves."""
        return f"refund {interrupt(f'approve refund of {order_id}?')}"

    script = [
        AIMessage(content="", tool_calls=[tool_call("refund", "r1", order_id="A-1")]),
        AIMessage(content="Refunded."),
    ]
    agent = create_agent(
        ScriptedChatModel(replies=script), tools=[refund], checkpointer=InMemorySaver()
    )
    handler = AgentEvalCallbackHandler(evaluator)
    config: Any = {"callbacks": [handler], "configurable": {"thread_id": "t-9"}}
    paused = agent.invoke({"messages": [("user", "Refund A-1")]}, config=config)
    assert paused["__interrupt__"][0].value == "approve refund of A-1?"
    elsewhere = OnlineEvaluator(capture=tmp_path / "elsewhere.jsonl", log=False)
    resumer = {
        "the same handler": handler,
        "a handler per request": AgentEvalCallbackHandler(evaluator),
        "elsewhere": AgentEvalCallbackHandler(elsewhere),
    }[resumed_by]
    agent.invoke(Command(resume="approved"), config={**config, "callbacks": [resumer]})
    elsewhere.close()
    if resumed_by == "elsewhere":
        [first], [second] = evaluator.captured(), elsewhere.captured()
    else:
        first, second = evaluator.captured()
    assert (first.status, first.status_reason, first.error) == (
        RunStatus.INTERRUPTED,
        "waiting for a human: approve refund of A-1?",
        None,
    )
    [waiting] = first.spans_of(SpanKind.TOOL)
    assert waiting.error is None and waiting.attributes["agenteval.control_flow"] == "interrupt"
    assert not any(span.error for span in first.spans)  # a pause is not a failure
    assert first.output is None  # paused: no final answer yet
    # the resumed run carries on the paused run's request; the human's answer is beside it
    assert (second.input, second.status, second.output) == (
        "Refund A-1",
        RunStatus.OK,
        "Refunded.",
    )
    assert second.metadata["resume"] == "approved"
    # the paused trace is named where the pause was seen (the request comes from the
    # thread's state otherwise)
    linked = None if resumed_by == "elsewhere" else first.id
    assert second.metadata.get("resumes_trace_id") == linked
    [call] = second.tool_calls()
    assert (call.name, call.arguments, call.result) == (
        "refund",
        {"order_id": "A-1"},
        "refund approved",
    )
    if resumed_by == "elsewhere":
        return  # the session's traces are in two captures
    # a paused-and-resumed session with no failure is a healthy one: the pause is no
    # failed run (it was: run_completed 0.0, reliability 0.0 with the paused trace flagged)
    assert evaluator.capture_path is not None
    report = replay(evaluator.capture_path, ["tool_failures", "agent_reliability"])
    by_trace: dict[str, Any] = {}
    replay(
        evaluator.capture_path,
        ["coherence"],
        on_trace=lambda trace, results: by_trace.update({trace.id: results[0]}),
    )
    assert by_trace[first.id].status == "skipped"  # no final answer to compare
    [reliability] = report.session_results["t-9"]
    assert reliability.metadata["flagged_traces"] == []
    assert reliability.score == 1.0


class OrderStatus(BaseModel):
    order_id: str
    status: str


@pytest.mark.parametrize(
    ("decision", "calls", "told"),
    [
        (
            {"type": "approve"},
            [("c1", {"order_id": "A-1", "amount": 500.0}, "refunded 500.0 on A-1")],
            '{"decisions": [{"type": "approve"}]}',
        ),
        (
            {"type": "edit", "edited_action": {"name": "refund", "args": {"order_id": "A-1", "amount": 50.0}}},
            [("c1", {"order_id": "A-1", "amount": 50.0}, "refunded 50.0 on A-1")],
            '{"decisions": [{"edited_action": {"args": {"amount": 50.0, "order_id": "A-1"}, '
            '"name": "refund"}, "type": "edit"}]}',
        ),
        (
            {"type": "reject", "message": "Too much."},
            [],
            '{"decisions": [{"message": "Too much.", "type": "reject"}]}',
        ),
    ],
)  # fmt: skip
def test_a_human_reviewers_decision_is_what_the_resumed_run_went_on_from(
    evaluator: OnlineEvaluator,
    decision: dict[str, Any],
    calls: list[tuple[str, dict[str, Any], str]],
    told: str,
) -> None:
    # HumanInTheLoopMiddleware pauses before the tool runs; the reviewer approves, edits
    # the arguments, or rejects the call. A judge of the resumed run was told the request
    # and the answer only: after a rejection, an answer with no refund and no reason why
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        return f"refunded {amount} on {order_id}"

    script = [
        AIMessage(content="", tool_calls=[tool_call("refund", "c1", order_id="A-1", amount=500.0)]),
        AIMessage(content="Handled."),
    ]
    agent = create_agent(
        ScriptedChatModel(replies=script),
        tools=[refund],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"refund": True})],
        checkpointer=InMemorySaver(),
    )
    config: Any = {
        "callbacks": [AgentEvalCallbackHandler(evaluator)],
        "configurable": {"thread_id": "t-5"},
    }
    agent.invoke({"messages": [("user", "Refund A-1")]}, config=config)
    agent.invoke(Command(resume={"decisions": [decision]}), config=config)
    paused, resumed = evaluator.captured()
    assert paused.status is RunStatus.INTERRUPTED and paused.tool_calls() == []
    # its tools did nothing yet: the tool metrics have nothing to pass (they passed it, and
    # fed the session two perfect signals for each pause)
    for metric in (ToolFailures(), ToolCallLoops()):
        result = metric.measure(paused)
        assert (result.skipped, result.score, result.reason) == (
            True,
            None,
            "no tool calls in a run that did not complete (interrupted)",
        )
    assert [(c.id, c.name, c.arguments) for c in paused.spans_of(SpanKind.LLM)[0].requested_tool_calls] == [
        ("c1", "refund", {"order_id": "A-1", "amount": 500.0})
    ]  # fmt: skip
    assert (resumed.input, resumed.status, resumed.output) == (
        "Refund A-1",
        RunStatus.OK,
        "Handled.",
    )
    assert resumed.metadata == {
        "thread_id": "t-5",
        "resume": {"decisions": [decision]},
        "resumes_trace_id": paused.id,
    }
    # the call as it ran: the reviewer's arguments, never the model's
    assert [(c.id, c.arguments, c.result) for c in resumed.tool_calls()] == calls
    lines = describe_trace(EvalCase.of(resumed)).splitlines()
    assert lines[:2] == [
        "user input: Refund A-1",
        f"the run resumed after a pause for a human, who answered: {told}",
    ]


def test_interrupts_answered_by_id_are_recorded_with_what_each_asked(
    evaluator: OnlineEvaluator,
) -> None:
    # two refunds approved in their tools at once: two interrupts (parallel tool tasks),
    # answered by id. The resumed run kept the ids alone: a judge was told
    # "{'5ba6…': 'yes', '31e1…': 'no'}", and a new run, whose interrupts have new ids,
    # could not be given the answers
    @tool
    def refund(order_id: str) -> str:
        """Refund an order once a reviewer approves it."""
        approved = interrupt(f"Approve the refund of {order_id}?") == "yes"
        return f"refunded {order_id}" if approved else f"refund of {order_id} rejected"

    script = [
        AIMessage(
            content="",
            tool_calls=[
                tool_call("refund", "c1", order_id="A-1"),
                tool_call("refund", "c2", order_id="B-2"),
            ],
        ),
        AIMessage(content="A-1 refunded, B-2 not."),
    ]
    agent = create_agent(
        ScriptedChatModel(replies=script), tools=[refund], checkpointer=InMemorySaver()
    )
    config: Any = {
        "callbacks": [AgentEvalCallbackHandler(evaluator)],
        "configurable": {"thread_id": "t-7"},
    }
    paused_at = agent.invoke({"messages": [("user", "Refund A-1 and B-2")]}, config=config)
    ids = {i.value: i.id for i in paused_at["__interrupt__"]}
    assert set(ids) == {"Approve the refund of A-1?", "Approve the refund of B-2?"}
    first, second = ids["Approve the refund of A-1?"], ids["Approve the refund of B-2?"]
    # one answered, then the other: the run pauses again at the one left
    agent.invoke(Command(resume={first: "yes"}), config=config)
    agent.invoke(Command(resume={second: "no"}), config=config)
    paused, half, resumed = evaluator.captured()
    assert (paused.status, half.status, resumed.status) == (
        RunStatus.INTERRUPTED,
        RunStatus.INTERRUPTED,
        RunStatus.OK,
    )
    # waiting at both (the reason had named the one whose task paused first), then at one
    assert (paused.status_reason, half.status_reason) == (
        "waiting for a human: Approve the refund of A-1?; Approve the refund of B-2?",
        "waiting for a human: Approve the refund of B-2?",
    )
    assert half.metadata == {
        "thread_id": "t-7",
        "resume": {first: "yes"},
        "resume_questions": {first: "Approve the refund of A-1?"},
        "resumes_trace_id": paused.id,
    }
    assert resumed.metadata == {
        "thread_id": "t-7",
        "resume": {second: "no"},
        "resume_questions": {second: "Approve the refund of B-2?"},
        "resumes_trace_id": half.id,
    }
    assert [(c.id, c.result) for c in resumed.tool_calls()] == [("c2", "refund of B-2 rejected")]
    assert describe_trace(EvalCase.of(half)).splitlines()[:2] == [
        "user input: Refund A-1 and B-2",
        'the run resumed after a pause for a human, who was asked "Approve the refund of '
        'A-1?" and answered: yes',
    ]


def test_structured_output_is_the_runs_output(evaluator: OnlineEvaluator) -> None:
    # a model without native structured output answers through its schema offered as a
    # tool (ToolStrategy): that schema was listed among the agent's tools
    script = [
        AIMessage(content="", tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")]),
        AIMessage(
            content="",
            tool_calls=[tool_call("OrderStatus", "s1", order_id="A-1", status="shipped")],
        ),
    ]
    agent = create_agent(
        ScriptedChatModel(replies=script), tools=[lookup_order], response_format=OrderStatus
    )
    result = agent.invoke(
        {"messages": [("user", "Status of A-1?")]},
        config={"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    assert result["structured_response"] == OrderStatus(order_id="A-1", status="shipped")
    assert trace.output == {"order_id": "A-1", "status": "shipped"}
    assert [spec.name for spec in trace.tools] == ["lookup_order"]
    assert [(c.id, c.name, c.result) for c in trace.tool_calls()] == [
        ("c1", "lookup_order", "shipped")
    ]


def test_a_prebuilt_agents_structured_answer_is_no_step(evaluator: OnlineEvaluator) -> None:
    # create_react_agent(response_format=...) asks the model once more after its loop for
    # the answer in the schema: that call was a step of its own, and the schema a tool
    script = [
        AIMessage(content="", tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")]),
        AIMessage(content="A-1 has shipped."),
        AIMessage(
            content="",
            tool_calls=[tool_call("OrderStatus", "s1", order_id="A-1", status="shipped")],
        ),
    ]
    agent = create_react_agent(
        ScriptedChatModel(replies=script), tools=[lookup_order], response_format=OrderStatus
    )
    agent.invoke(
        {"messages": [("user", "Status of A-1?")]},
        config={"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    assert trace.output == {"order_id": "A-1", "status": "shipped"}
    assert [spec.name for spec in trace.tools] == ["lookup_order"]
    assert [(step.output, [c.id for c in step.tool_calls]) for step in trace.steps()] == [
        (None, ["c1"]),
        ("A-1 has shipped.", []),
    ]
    [asked] = [s for s in trace.spans_of(SpanKind.LLM) if s.attributes.get(INTERNAL_CALL)]
    assert [c.name for c in asked.requested_tool_calls] == ["OrderStatus"]


class Ticket(TypedDict):
    log: list[str]


def test_a_handoff_is_control_flow_not_an_error(evaluator: OnlineEvaluator) -> None:
    def triage(state: Ticket) -> Command[Any]:
        return Command(graph=Command.PARENT, goto="billing", update={"log": ["handed off"]})

    inner = StateGraph(Ticket)
    inner.add_node("triage", triage)
    inner.add_edge(START, "triage")
    outer = StateGraph(Ticket)
    outer.add_node("support", inner.compile())
    outer.add_node("billing", lambda state: {"log": [*state["log"], "billed"]})
    outer.add_edge(START, "support")
    outer.add_edge("billing", END)
    result = outer.compile().invoke(
        {"log": []}, config={"callbacks": [AgentEvalCallbackHandler(evaluator)]}
    )
    assert result == {"log": ["handed off", "billed"]}
    [trace] = evaluator.captured()
    assert (trace.status, trace.error) == (RunStatus.OK, None)
    handed = [s for s in trace.spans if s.attributes.get("agenteval.control_flow") == "handoff"]
    assert {s.name for s in handed} == {"triage", "support", "LangGraph"}
    assert all(
        s.error is None and s.attributes["agenteval.handoff.goto"] == "billing" for s in handed
    )
    assert "billing" in {s.name for s in trace.spans}


@tool
def refund(order_id: str) -> str:
    """Refund an order."""
    return "refunded"


def _step_agents(trace: Trace) -> list[tuple[SpanKind, str, str | None, Any]]:
    """Each LLM and tool span: its kind, name, enclosing agent span and recorded agent name."""
    return [
        (s.kind, s.name, _agent_of(trace, s), s.attributes.get("gen_ai.agent.name"))
        for s in trace.spans
        if s.kind in (SpanKind.LLM, SpanKind.TOOL)
    ]


def _agent_of(trace: Trace, span: Span) -> str | None:
    """The name of the nearest agent span above ``span`` (the root aside)."""
    spans = {s.id: s for s in trace.spans}
    parent = spans.get(span.parent_id or "")
    while parent is not None:
        if parent.kind is SpanKind.AGENT and parent.parent_id is not None:
            return parent.name
        parent = spans.get(parent.parent_id or "")
    return None


def test_sub_agents_are_agent_spans_their_steps_nest_under(evaluator: OnlineEvaluator) -> None:
    # a supervisor-style graph: two create_agent(name=...) workers run one after the other
    orders = orders_agent(create_agent)
    refunds = create_agent(
        ScriptedChatModel(
            replies=[
                AIMessage("", tool_calls=[tool_call("refund", "r1", order_id="A-1")]),
                AIMessage("Refunded A-1."),
            ]
        ),
        tools=[refund],
        name="refunds_agent",
    )
    team = StateGraph(MessagesState)
    team.add_node("orders_agent", orders)
    team.add_node("refunds_agent", refunds)
    team.add_edge(START, "orders_agent")
    team.add_edge("orders_agent", "refunds_agent")
    team.add_edge("refunds_agent", END)
    team.compile().invoke(
        {"messages": [("user", "Where is A-1? Refund it.")]},
        config={"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    agents = [s for s in trace.spans if s.kind is SpanKind.AGENT and s.parent_id is not None]
    assert [(a.name, a.input, a.output, a.attributes) for a in agents] == [
        (
            "orders_agent",
            "Where is A-1? Refund it.",
            "A-1 has shipped.",
            {"gen_ai.agent.name": "orders_agent"},
        ),
        (
            "refunds_agent",
            "Where is A-1? Refund it.",
            "Refunded A-1.",
            {"gen_ai.agent.name": "refunds_agent"},
        ),
    ]
    assert _step_agents(trace) == [
        (SpanKind.LLM, "scripted-model", "orders_agent", "orders_agent"),
        (SpanKind.TOOL, "lookup_order", "orders_agent", "orders_agent"),
        (SpanKind.LLM, "scripted-model", "orders_agent", "orders_agent"),
        (SpanKind.LLM, "scripted-model", "refunds_agent", "refunds_agent"),
        (SpanKind.TOOL, "refund", "refunds_agent", "refunds_agent"),
        (SpanKind.LLM, "scripted-model", "refunds_agent", "refunds_agent"),
    ]
    assert [(c.id, c.name, c.result) for c in trace.tool_calls()] == [
        ("o1", "lookup_order", "shipped"),
        ("r1", "refund", "refunded"),
    ]
    assert trace.output == "Refunded A-1."


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # create_react_agent moved in v1
def test_a_supervisors_react_agents_get_agent_spans_and_names(
    evaluator: OnlineEvaluator,
) -> None:
    # langgraph-supervisor's layout: a create_react_agent(name="supervisor") node with
    # handoff tools, workers that are create_react_agent(name=...) nodes reporting back
    result = supervised_team(create_react_agent).invoke(
        {"messages": [("user", "Where is A-1?")]},
        config={"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    assert result["messages"][-1].content == "Your order A-1 has shipped."
    [trace] = evaluator.captured()
    agents = [s for s in trace.spans if s.kind is SpanKind.AGENT and s.parent_id is not None]
    # it was: no agent span below the root, and no span carried an agent name
    assert [(a.name, a.input, a.output, a.attributes) for a in agents] == [
        (  # handed off: control flow, no answer of its own
            "supervisor",
            "Where is A-1?",
            None,
            {
                "gen_ai.agent.name": "supervisor",
                "agenteval.control_flow": "handoff",
                "agenteval.handoff.goto": "orders_agent",
            },
        ),
        (
            "orders_agent",
            "Where is A-1?",
            "A-1 has shipped.",
            {"gen_ai.agent.name": "orders_agent"},
        ),
        (
            "supervisor",
            "Where is A-1?",
            "Your order A-1 has shipped.",
            {"gen_ai.agent.name": "supervisor"},
        ),
    ]
    assert _step_agents(trace) == [
        (SpanKind.LLM, "scripted-model", "supervisor", "supervisor"),
        (SpanKind.TOOL, "transfer_to_orders_agent", "supervisor", "supervisor"),
        (SpanKind.LLM, "scripted-model", "orders_agent", "orders_agent"),
        (SpanKind.TOOL, "lookup_order", "orders_agent", "orders_agent"),
        (SpanKind.LLM, "scripted-model", "orders_agent", "orders_agent"),
        (SpanKind.LLM, "scripted-model", "supervisor", "supervisor"),
    ]
    assert [(c.id, c.name, c.arguments, c.error) for c in trace.tool_calls()] == [
        ("h1", "transfer_to_orders_agent", {}, None),
        ("o1", "lookup_order", {"order_id": "A-1"}, None),
    ]
    assert (trace.status, trace.output) == (RunStatus.OK, "Your order A-1 has shipped.")


def _delegating_team(orders: list[str | None]) -> Any:
    """A supervisor (create_agent) that hands the conversation to orders_agent once per
    entry of ``orders``, the worker looking that order up each time (``None``: answering
    without a call), then answers."""

    @tool
    def lookup(order_id: str) -> str:
        """Status of an order."""
        return "shipped"

    asked = iter(orders)

    def worker(messages: list[Any]) -> AIMessage:
        looked = isinstance(messages[-1], ToolMessage) and messages[-1].name == "lookup"
        order = None if looked else next(asked)
        if order is None:
            return AIMessage("Looked it up.")
        return AIMessage("", tool_calls=[tool_call("lookup", f"o{len(messages)}", order_id=order)])

    handoffs = [
        AIMessage("", tool_calls=[tool_call("transfer_to_orders_agent", f"h{i}")])
        for i in range(len(orders))
    ]
    supervisor = create_agent(
        ScriptedChatModel(replies=[*handoffs, AIMessage("All three have shipped.")]),
        tools=[handoff("orders_agent")],
        name="supervisor",
    )
    team = StateGraph(MessagesState)
    team.add_node(supervisor, destinations=("orders_agent", END))
    team.add_node(
        create_agent(ScriptedChatModel(reply=worker), tools=[lookup], name="orders_agent")
    )
    team.add_edge(START, "supervisor")
    team.add_edge("orders_agent", "supervisor")
    return team.compile()


def test_a_supervisor_that_delegates_each_part_to_one_worker_does_not_loop(
    evaluator: OnlineEvaluator,
) -> None:
    # langgraph-supervisor's handoff tools take no arguments: three handoffs to one worker
    # were one call three times, a loop alert, and with stop_on_loop the guard stopped a
    # healthy run at the third. The worker looked up a new order each time: delegation
    team = _delegating_team(["A-1", "B-2", "C-3"])
    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=True)
    result = team.invoke(
        {"messages": [("user", "Where are A-1, B-2 and C-3?")]}, {"callbacks": [handler]}
    )
    assert result["messages"][-1].content == "All three have shipped."
    [trace] = evaluator.captured()
    assert (trace.status, trace.alerts) == (RunStatus.OK, [])
    assert [(c.name, c.arguments) for c in trace.tool_calls()] == [
        ("transfer_to_orders_agent", {}),
        ("lookup", {"order_id": "A-1"}),
        ("transfer_to_orders_agent", {}),
        ("lookup", {"order_id": "B-2"}),
        ("transfer_to_orders_agent", {}),
        ("lookup", {"order_id": "C-3"}),
    ]
    loops = ToolCallLoops().measure(trace)
    assert (loops.score, loops.reason) == (1.0, "no repeated calls or cycles among 6 tool calls")


def test_a_supervisor_that_hands_off_with_nothing_new_between_loops(
    evaluator: OnlineEvaluator,
) -> None:
    # the worker answers without a call each time: nothing new between the handoffs, so
    # the third is a loop, stopped before it runs (a worker that looks the same order up
    # each time closes the cycle handoff → lookup at its second lookup)
    from agenteval_langchain import AgentLoopError

    team = _delegating_team([None, None, None])
    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=True)
    with pytest.raises(AgentLoopError):
        team.invoke({"messages": [("user", "Where is A-1?")]}, {"callbacks": [handler]})
    [trace] = evaluator.captured()
    [alert] = trace.alerts
    assert (trace.status, alert.pattern, alert.count, alert.message) == (
        RunStatus.STOPPED,
        "repeated_call",
        3,
        "transfer_to_orders_agent called 3 times with the same arguments {}",
    )
    assert [c.id for c in alert.calls] == ["h0", "h1", "h2"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_an_agent_inside_a_named_team_is_named_after_the_nearest_one(
    evaluator: OnlineEvaluator,
) -> None:
    # hierarchical teams: a named team graph holds a worker agent; the team's own steps
    # are the team's, the worker's are the worker's, an unnamed subgraph is no agent
    worker = create_react_agent(
        ScriptedChatModel(replies=[AIMessage("Checked.")]), tools=[], name="checker"
    )
    inner = StateGraph(MessagesState)
    inner.add_node(worker)
    inner.add_edge(START, "checker")
    plain = StateGraph(MessagesState)
    plain.add_node("log", lambda state: {"messages": []})
    plain.add_edge(START, "log")
    inner.add_node("plain", plain.compile())
    inner.add_edge("checker", "plain")
    top = StateGraph(MessagesState)
    top.add_node("review_team", inner.compile(name="review_team"))
    top.add_edge(START, "review_team")
    top.compile().invoke(
        {"messages": [("user", "Check it.")]},
        config={"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    agents = [
        (s.name, _agent_of(trace, s), s.input, s.output)
        for s in trace.spans
        if s.kind is SpanKind.AGENT and s.parent_id is not None
    ]
    assert agents == [
        ("review_team", None, "Check it.", "Checked."),
        ("checker", "review_team", "Check it.", "Checked."),
    ]
    [llm] = trace.spans_of(SpanKind.LLM)
    assert (_agent_of(trace, llm), llm.attributes["gen_ai.agent.name"]) == ("checker", "checker")
    [log] = [s for s in trace.spans if s.name == "log"]
    assert (log.kind, log.attributes.get("gen_ai.agent.name")) == (
        SpanKind.CHAIN,
        "review_team",
    )


def test_cached_and_reasoning_tokens_are_kept_where_the_provider_reports_them(
    evaluator: OnlineEvaluator,
) -> None:
    usage = {
        "input_tokens": 120,
        "output_tokens": 40,
        "total_tokens": 160,
        "input_token_details": {"cache_read": 100, "cache_creation": 0},
        "output_token_details": {"reasoning": 32},
    }
    model = ScriptedChatModel(replies=[AIMessage("Shipped.", usage_metadata=usage)])
    agent = create_agent(model, tools=[lookup_order])
    handler = AgentEvalCallbackHandler(evaluator)
    agent.invoke({"messages": [("user", "Where is A-1?")]}, {"callbacks": [handler]})
    [trace] = evaluator.captured()
    [llm] = [s for s in trace.spans if s.kind is SpanKind.LLM]
    tokens = {k: v for k, v in llm.attributes.items() if k.startswith("gen_ai.usage.")}
    assert tokens == {
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 40,
        "gen_ai.usage.cache_read.input_tokens": 100,  # a zero cache_creation is left out
        "gen_ai.usage.reasoning.output_tokens": 32,
    }


def test_a_streamed_run_records_its_time_to_first_token(evaluator: OnlineEvaluator) -> None:
    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")]),
            AIMessage("Order A-1 has shipped."),
        ]
    )
    agent = create_agent(model, tools=[lookup_order])
    handler = AgentEvalCallbackHandler(evaluator)
    chunks = [
        message.content
        for message, _ in agent.stream(
            {"messages": [("user", "Where is A-1?")]},
            {"callbacks": [handler]},
            stream_mode="messages",
        )
        if message.type == "AIMessageChunk"
    ]
    assert "".join(chunks) == "Order A-1 has shipped."  # streamed word by word
    [trace] = evaluator.captured()
    llm_spans = [s for s in trace.spans if s.kind is SpanKind.LLM]
    assert [(c.id, c.name, c.arguments) for c in llm_spans[0].requested_tool_calls or []] == [
        ("c1", "lookup_order", {"order_id": "A-1"})
    ]
    assert llm_spans[1].output == "Order A-1 has shipped."
    for span in llm_spans:
        first = span.attributes["agenteval.time_to_first_token_ms"]
        assert 0 <= first <= (span.end_time - span.start_time) * 1000


def test_a_tool_artifact_is_kept_in_brief(evaluator: OnlineEvaluator) -> None:
    @tool(response_format="content_and_artifact")
    def export_orders(page: int) -> tuple[str, list[dict[str, Any]]]:
        """Export a page of orders."""
        rows = [{"order": f"A-{i}", "status": "shipped"} for i in range(3)]
        return f"{len(rows)} orders", rows

    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("export_orders", "c1", page=1)]),
            AIMessage("Exported 3 orders."),
        ]
    )
    agent = create_agent(model, tools=[export_orders])
    agent.invoke(
        {"messages": [("user", "Export")]}, {"callbacks": [AgentEvalCallbackHandler(evaluator)]}
    )
    [trace] = evaluator.captured()
    [span] = [s for s in trace.spans if s.tool_call is not None]
    rows = '[{"order": "A-0", "status": "shipped"}, {"order": "A-1", "status": "shipped"}, {"order": "A-2", "status": "shipped"}]'
    assert span.output == "3 orders"
    assert span.attributes["agenteval.tool.artifact"] == f"list, {len(rows)} characters: {rows}"


def test_an_image_in_the_request_is_kept_small_and_the_text_is_the_input(
    evaluator: OnlineEvaluator,
) -> None:
    # a vision request: the text and a 300 KB image as a data URL, sent again with each of
    # the run's model calls
    image = base64.b64encode(b"\x89PNG\r\n" + bytes(range(256)) * 1200).decode()
    request = HumanMessage(
        content=[
            {"type": "text", "text": "Where is the order on this label?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
        ]
    )
    script = [
        AIMessage("", tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")]),
        AIMessage("Order A-1 has shipped."),
    ]
    agent = create_agent(ScriptedChatModel(replies=script), tools=[lookup_order])
    agent.invoke({"messages": [request]}, {"callbacks": [AgentEvalCallbackHandler(evaluator)]})
    [trace] = evaluator.captured()
    assert (trace.input, trace.output) == (
        "Where is the order on this label?",
        "Order A-1 has shipped.",
    )
    omitted = f"data:image/png;base64,…[base64 data omitted: {len(image)} characters]"
    for llm in trace.spans_of(SpanKind.LLM):
        [[asked, *_]] = llm.input
        assert asked == {
            "role": "human",
            "content": [
                {"type": "text", "text": "Where is the order on this label?"},
                {"type": "image_url", "image_url": {"url": omitted}},
            ],
        }
    # what was 100,000 characters of undecodable base64 in each model call's span
    assert evaluator.capture_path is not None
    assert evaluator.capture_path.stat().st_size < 10_000
    # the text alone says too little to score coherence on, and a judge is told of the image
    assert trace.request_media() == ["image"]
    assert create_metric("coherence").measure(trace).skipped
    assert describe_trace(EvalCase.of(trace)).splitlines()[:2] == [
        "user input: Where is the order on this label?",
        "the user's request also held 1 image, not shown here",
    ]


def test_an_odd_field_costs_that_field_never_the_span(
    evaluator: OnlineEvaluator, caplog: Any
) -> None:
    # a provider (or a new release) reporting token details in a shape no one expected
    odd = AIMessage(
        content="Looking.", tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")]
    )
    odd.usage_metadata = {"input_tokens": 7, "output_tokens": 2, "input_token_details": "cached"}  # type: ignore[typeddict-item]
    script = [odd, AIMessage(content="A-1 has shipped.")]
    agent = create_agent(ScriptedChatModel(replies=script), tools=[lookup_order])
    with caplog.at_level("WARNING", logger="agenteval"):
        for _ in range(2):
            agent.invoke(
                {"messages": [("user", "Where is A-1?")]},
                config={"callbacks": [AgentEvalCallbackHandler(evaluator)]},
            )
        assert evaluator.flush(30)
    for trace in evaluator.captured():
        first, last = trace.spans_of(SpanKind.LLM)
        # the reply, its requested call and its end are all there; only the usage is not
        assert (first.output, first.error, first.end_time is not None) == ("Looking.", None, True)
        assert [(c.id, c.name, c.arguments) for c in first.requested_tool_calls] == [
            ("c1", "lookup_order", {"order_id": "A-1"})
        ]
        assert "gen_ai.usage.input_tokens" not in first.attributes
        assert last.output == "A-1 has shipped."
        assert all(span.error is None for span in trace.spans)
        assert (trace.status, trace.output) == (RunStatus.OK, "A-1 has shipped.")
    assert evaluator.stats.problems == {"event field": 2}
    said = [r.getMessage() for r in caplog.records if "event field" in r.getMessage()]
    assert len(said) == 1 and "the token usage was left out of a span" in said[0]


def test_a_node_that_returns_a_command_is_recorded_as_its_fields(
    evaluator: OnlineEvaluator,
) -> None:
    """A LangGraph ``Command`` reads as what it says, not as ``Command(update=…)`` text."""

    def route(state: Ticket) -> Command[Any]:
        return Command(goto="billing", update={"log": ["routed"]})

    graph = StateGraph(Ticket)
    graph.add_node("route", route)
    graph.add_node("billing", lambda state: {"log": [*state["log"], "billed"]})
    graph.add_edge(START, "route")
    graph.add_edge("billing", END)
    result = graph.compile().invoke(
        {"log": []}, config={"callbacks": [AgentEvalCallbackHandler(evaluator)]}
    )
    assert result == {"log": ["routed", "billed"]}
    [trace] = evaluator.captured()
    [route_span] = [span for span in trace.spans if span.name == "route"]
    assert route_span.output == {"update": {"log": ["routed"]}, "goto": "billing"}


def test_langgraphs_timeouts_end_a_run_as_timeout(evaluator: OnlineEvaluator) -> None:
    # LangGraph ends a run for taking too long two ways: a graph's step_timeout (a plain
    # TimeoutError("Timed out") from its loop) and a node's timeout (NodeTimeoutError). A
    # tool's own socket timeout is a TimeoutError too, and stays an error

    @tool
    def wait_for_approval(order_id: str) -> str:
        """Wait for a human to approve."""
        time.sleep(1.0)  # past the step timeout, whatever the machine: LangGraph waits for it
        return "approved"

    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        raise TimeoutError("read timed out")

    def calling(name: str, **arguments: Any) -> list[AIMessage]:
        return [AIMessage(content="", tool_calls=[tool_call(name, "c1", **arguments)])]

    handler = AgentEvalCallbackHandler(evaluator)
    stepped = create_agent(
        ScriptedChatModel(replies=calling("wait_for_approval", order_id="A-1")),
        tools=[wait_for_approval],
    )
    stepped.step_timeout = 0.2
    with pytest.raises(TimeoutError, match="Timed out"):
        stepped.invoke({"messages": [("user", "step")]}, config={"callbacks": [handler]})

    async def wait(state: MessagesState) -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    graph = StateGraph(MessagesState)
    graph.add_node("wait", wait, timeout=0.2)
    graph.add_edge(START, "wait")
    graph.add_edge("wait", END)
    with pytest.raises(NodeTimeoutError):
        asyncio.run(
            graph.compile().ainvoke({"messages": [("user", "node")]}, {"callbacks": [handler]})
        )
    failing = create_agent(
        ScriptedChatModel(replies=calling("fetch", url="https://example.com")), tools=[fetch]
    )
    with pytest.raises(TimeoutError, match="read timed out"):
        failing.invoke({"messages": [("user", "socket")]}, config={"callbacks": [handler]})
    assert evaluator.flush(30)
    by_input = {trace.input: trace for trace in evaluator.captured()}
    step, node, socket = by_input["step"], by_input["node"], by_input["socket"]
    assert (step.status, step.status_reason, step.error) == (
        RunStatus.TIMEOUT,
        "TimeoutError: Timed out",
        "TimeoutError: Timed out",
    )
    assert node.status is RunStatus.TIMEOUT and node.status_reason == node.error
    assert (node.error or "").startswith("NodeTimeoutError: ")
    assert (socket.status, socket.error) == (RunStatus.ERROR, "TimeoutError: read timed out")


def looking_up_a_1_for_ever() -> ScriptedChatModel:
    """A model that asks to look up A-1 again at every turn (ids c0, c1, ...)."""
    return ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("lookup_order", f"c{i}", order_id="A-1")])
            for i in range(10)
        ]
    )


@pytest.mark.parametrize(
    ("middleware", "reason", "executed"),
    [
        (
            ModelCallLimitMiddleware(run_limit=3),  # exit_behavior="end", the default
            "Model call limits exceeded: run limit (3/3)",
            3,
        ),
        (
            ModelCallLimitMiddleware(run_limit=3, exit_behavior="error"),
            "ModelCallLimitExceededError: Model call limits exceeded: run limit (3/3)",
            3,
        ),
        (
            ToolCallLimitMiddleware(run_limit=2, exit_behavior="end"),
            "Tool call limit reached: run limit exceeded (3/2 calls).",
            2,
        ),
        (
            ToolCallLimitMiddleware(run_limit=2, exit_behavior="error"),
            "ToolCallLimitExceededError: Tool call limit reached: run limit exceeded (3/2 calls).",
            2,
        ),
    ],
    ids=["model-end", "model-error", "tool-end", "tool-error"],
)
def test_a_run_a_call_limit_middleware_ended_is_a_limit_not_a_completed_run(
    evaluator: OnlineEvaluator, middleware: Any, reason: str, executed: int
) -> None:
    # LangChain's call-limit middlewares end a looping run with a message of their own: it
    # was an "ok" run whose answer was "Model call limits exceeded", scored as one; raised,
    # an "error" run, as if a tool had broken
    agent = create_agent(looking_up_a_1_for_ever(), tools=[lookup_order], middleware=[middleware])
    handler = AgentEvalCallbackHandler(evaluator)
    with contextlib.suppress(ModelCallLimitExceededError, ToolCallLimitExceededError):
        agent.invoke({"messages": [("user", "Where is A-1?")]}, {"callbacks": [handler]})
    [trace] = evaluator.captured()
    assert (trace.status, trace.status_reason) == (RunStatus.LIMIT, reason)
    assert [c.result for c in trace.tool_calls()] == ["shipped"] * executed
    # so a suite fails the attempt, and the session's reliability counts the run as failed
    assert trace.incomplete


def test_create_react_agents_answer_at_its_step_limit_is_a_limit(
    evaluator: OnlineEvaluator,
) -> None:
    # LangGraph's prebuilt agent, short of steps, answers "Sorry, need more steps to process
    # this request." instead of raising the recursion error: an "ok" run with that answer
    agent = create_react_agent(looking_up_a_1_for_ever(), tools=[lookup_order])
    handler = AgentEvalCallbackHandler(evaluator)
    state = agent.invoke(
        {"messages": [("user", "Where is A-1?")]}, {"callbacks": [handler], "recursion_limit": 6}
    )
    assert state["messages"][-1].content == "Sorry, need more steps to process this request."
    [trace] = evaluator.captured()
    assert (trace.status, trace.status_reason) == (
        RunStatus.LIMIT,
        "out of steps (recursion_limit): the agent answered "
        "'Sorry, need more steps to process this request.'",
    )
    assert [c.result for c in trace.tool_calls()] == ["shipped"] * 2


def test_a_sub_agent_its_limit_ended_leaves_the_run_to_answer(
    evaluator: OnlineEvaluator,
) -> None:
    # the middleware ends the sub-agent's graph, not the run: the parent goes on and answers
    researcher = create_agent(
        looking_up_a_1_for_ever(),
        tools=[lookup_order],
        middleware=[ModelCallLimitMiddleware(run_limit=2)],
        name="researcher",
    )

    def research(state: MessagesState) -> dict[str, Any]:
        return {"messages": researcher.invoke(state)["messages"][len(state["messages"]) :]}

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("A-1 is on its way.")]}

    graph = StateGraph(MessagesState)
    graph.add_node("research", research)
    graph.add_node("answer", answer)
    graph.add_edge(START, "research")
    graph.add_edge("research", "answer")
    graph.add_edge("answer", END)
    handler = AgentEvalCallbackHandler(evaluator)
    graph.compile().invoke({"messages": [("user", "Where is A-1?")]}, {"callbacks": [handler]})
    [trace] = evaluator.captured()
    assert (trace.status, trace.output) == (RunStatus.OK, "A-1 is on its way.")
    assert [c.result for c in trace.tool_calls()] == ["shipped"] * 2


def test_a_tool_that_answers_with_a_command_has_its_tool_message_as_result(
    evaluator: OnlineEvaluator,
) -> None:
    # LangGraph's way for a tool to update the agent's state: return
    # Command(update={..., "messages": [ToolMessage(...)]}). The call's result was the whole
    # command as a dict, and a tool message with status "error" in it was no failure
    from langchain.agents import AgentState

    class Profile(AgentState):
        user_name: str

    @tool
    def remember_name(user: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Remember the user's name."""
        said = ToolMessage(f"Saved the name {user}", tool_call_id=tool_call_id)
        return Command(update={"user_name": user, "messages": [said]})

    @tool
    def save_preference(drink: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Save what the user likes to drink."""
        said = ToolMessage("preference store is down", tool_call_id=tool_call_id, status="error")
        return Command(update={"messages": [said]})

    model = ScriptedChatModel(
        replies=[
            AIMessage(
                "",
                tool_calls=[
                    tool_call("remember_name", "c1", user="Ada"),
                    tool_call("save_preference", "c2", drink="tea"),
                ],
            ),
            AIMessage("Nice to meet you, Ada."),
        ]
    )
    agent = create_agent(model, tools=[remember_name, save_preference], state_schema=Profile)
    state = agent.invoke(
        {"messages": [("user", "I'm Ada and I like tea")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    assert state["user_name"] == "Ada"
    [trace] = evaluator.captured()
    assert sorted((c.id, c.name, c.arguments, c.result, c.error) for c in trace.tool_calls()) == [
        ("c1", "remember_name", {"user": "Ada"}, "Saved the name Ada", None),
        (
            "c2",
            "save_preference",
            {"drink": "tea"},
            "preference store is down",
            "preference store is down",
        ),
    ]
    assert (trace.output, trace.status) == ("Nice to meet you, Ada.", RunStatus.OK)


def test_a_retried_tool_call_keeps_each_runs_own_result(evaluator: OnlineEvaluator) -> None:
    # ToolRetryMiddleware runs a failed call again under the same id. The model is shown
    # the last run's result; the failed run before a success was given that success as its
    # result ("A-1 shipped" beside "orders API timed out")
    from langchain.agents.middleware import ToolRetryMiddleware

    runs: list[str] = []

    @tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        runs.append(f"lookup {order_id}")
        if runs.count(f"lookup {order_id}") == 1:
            raise ConnectionError("orders API timed out")
        return f"{order_id} shipped"

    @tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        runs.append(f"refund {order_id}")
        raise ConnectionError("payments API down")

    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("lookup", "c1", order_id="A-1")]),
            AIMessage("", tool_calls=[tool_call("refund", "c2", order_id="A-1")]),
            AIMessage("A-1 has shipped; the refund failed."),
        ]
    )
    retry = ToolRetryMiddleware(max_retries=1, initial_delay=0, retry_on=(ConnectionError,))
    agent = create_agent(model, tools=[lookup, refund], middleware=[retry])
    agent.invoke(
        {"messages": [("user", "Where is A-1? Refund it.")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    assert runs == ["lookup A-1", "lookup A-1", "refund A-1", "refund A-1"]
    [trace] = evaluator.captured()
    [shown] = [  # what the middleware told the model once the retries were spent
        m["content"]
        for s in trace.spans
        if s.kind is SpanKind.LLM
        for m in s.input[0]
        if m["role"] == "tool" and "refund" in str(m["content"])
    ]
    assert [(c.id, c.result, c.error) for c in trace.tool_calls(every_run=True)] == [
        ("c1", None, "ConnectionError: orders API timed out"),
        ("c1", "A-1 shipped", None),
        ("c2", None, "ConnectionError: payments API down"),
        ("c2", shown, "ConnectionError: payments API down"),
    ]
    # the agent made two calls, each its last run: the lookup worked, the refund failed
    assert [(c.id, c.result, c.error) for c in trace.tool_calls()] == [
        ("c1", "A-1 shipped", None),
        ("c2", shown, "ConnectionError: payments API down"),
    ]
    assert [[c.id for c in step.tool_calls] for step in trace.steps()] == [["c1"], ["c2"], []]
    failures = ToolFailures().measure(trace)
    # one failed call of two, owned up to: 1 - (1 failure + 0 unrecovered) / (2 x 2)
    assert (failures.score, failures.metadata["failed"], failures.metadata["runs_retried"]) == (
        0.75,
        1,
        2,
    )
    assert failures.reason == (
        "1 of 2 tool calls failed (refund), 0 not recovered (the framework ran a call again "
        "2 times: each call counts as its last run)"
    )


def _run_retried(agent: Any, runs: list[str], tmp_path: Path, stop_on_loop: bool) -> Trace:
    """Ask ``agent``, whose lookup ToolRetryMiddleware runs three times until it answers,
    where A-1 is; check that it answered, with no loop alert and no stop; its trace."""
    alerts: list[Any] = []
    with OnlineEvaluator(
        capture=tmp_path / "capture.jsonl", on_alert=alerts.append, log=False
    ) as evaluator:
        handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=stop_on_loop)
        state = agent.invoke({"messages": [("user", "Where is A-1?")]}, {"callbacks": [handler]})
        assert evaluator.flush(10)
    assert state["messages"][-1].content == "A-1 has shipped."
    assert runs == ["A-1"] * 3 and alerts == []
    [trace] = read_capture(tmp_path / "capture.jsonl")
    assert (trace.status, trace.alerts) == (RunStatus.OK, [])
    return trace


@pytest.mark.parametrize("stop_on_loop", [True, False])
def test_a_call_its_retry_middleware_runs_again_is_no_loop(
    tmp_path: Path, stop_on_loop: bool
) -> None:
    # ToolRetryMiddleware runs a call that raised again under its id, without asking the
    # model: three runs of one call reached the guard's threshold, so the guard raised a loop
    # alert on a transient error and, with stop_on_loop, refused the run that would have
    # worked and stopped a run that was going well
    agent, runs = retrying_agent()
    trace = _run_retried(agent, runs, tmp_path, stop_on_loop)
    assert [(c.id, c.result, c.error) for c in trace.tool_calls(every_run=True)] == [
        ("c1", None, "ConnectionError: orders API timed out"),
        ("c1", None, "ConnectionError: orders API timed out"),
        ("c1", "A-1 shipped", None),
    ]
    [call] = trace.tool_calls()
    assert (call.id, call.name, call.arguments, call.result) == (
        "c1",
        "lookup",
        {"order_id": "A-1"},
        "A-1 shipped",
    )
    loops, failures = ToolCallLoops().measure(trace), ToolFailures().measure(trace)
    assert (loops.score, loops.reason) == (1.0, "no repeated calls or cycles among 1 tool calls")
    assert (failures.score, failures.reason) == (
        1.0,
        "none of 1 tool calls failed (the framework ran a call again 2 times: each call "
        "counts as its last run)",
    )


@pytest.mark.parametrize("stop_on_loop", [True, False])
def test_a_retried_tool_that_calls_a_model_itself_is_still_one_call(
    tmp_path: Path, stop_on_loop: bool
) -> None:
    # a tool that has a model summarise what it fetched, then times out, run again by
    # ToolRetryMiddleware: its own model call between the runs read as the agent's model
    # asking again, so the three runs were three calls of the agent, a loop; with
    # stop_on_loop the guard refused the run that would have worked
    from langchain.agents.middleware import ToolRetryMiddleware

    summarizer = ScriptedChatModel(replies=[AIMessage("A-1: in transit")])
    runs: list[str] = []

    @tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        runs.append(order_id)
        summary = summarizer.invoke(f"Summarise the status of {order_id}").content
        if len(runs) <= 2:
            raise ConnectionError("orders API timed out")
        return f"{summary}, shipped"

    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("lookup", "c1", order_id="A-1")]),
            AIMessage("A-1 has shipped."),
        ]
    )
    retry = ToolRetryMiddleware(max_retries=2, initial_delay=0, retry_on=(ConnectionError,))
    agent = create_agent(model, tools=[lookup], middleware=[retry])
    trace = _run_retried(agent, runs, tmp_path, stop_on_loop)
    tools = {span.id for span in trace.spans if span.kind is SpanKind.TOOL}
    inner = [span for span in trace.spans_of(SpanKind.LLM) if span.parent_id in tools]
    assert [span.output for span in inner] == ["A-1: in transit"] * 3  # inside each run
    assert [(c.id, c.result) for c in trace.tool_calls()] == [("c1", "A-1: in transit, shipped")]
    assert ToolCallLoops().measure(trace).score == 1.0
    assert ToolFailures().measure(trace).score == 1.0


@pytest.mark.parametrize("stop_on_loop", [True, False])
def test_a_model_that_reuses_its_call_id_while_looping_is_still_caught(
    tmp_path: Path, stop_on_loop: bool
) -> None:
    # some model servers give every call the same id: a call the model asks for again is a
    # call of its own (a model call came between), never its framework running one again
    from agenteval_langchain import AgentLoopError

    runs: list[str] = []

    @tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        runs.append(order_id)
        return "processing"

    model = ScriptedChatModel(
        replies=[AIMessage("", tool_calls=[tool_call("lookup", "0", order_id="A-1")])] * 4
        + [AIMessage("A-1 is still processing.")]
    )
    alerts: list[Any] = []
    message = 'lookup called 3 times with the same arguments {"order_id": "A-1"}'
    with OnlineEvaluator(
        capture=tmp_path / "capture.jsonl", on_alert=alerts.append, log=False
    ) as evaluator:
        handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=stop_on_loop)
        agent = create_agent(model, tools=[lookup])
        with pytest.raises(AgentLoopError) if stop_on_loop else contextlib.nullcontext():
            agent.invoke({"messages": [("user", "Where is A-1?")]}, {"callbacks": [handler]})
        assert evaluator.flush(10)
    assert [(a.pattern, a.count, a.message, a.stopped) for a in alerts] == [
        ("repeated_call", 3, message, stop_on_loop)
    ]
    assert runs == ["A-1"] * (2 if stop_on_loop else 4)  # a stop refuses the third
    [trace] = read_capture(tmp_path / "capture.jsonl")
    assert [c.id for c in trace.tool_calls()] == ["0"] * (3 if stop_on_loop else 4)
    assert ToolCallLoops().measure(trace).score == 0.0


@pytest.mark.parametrize("prebuilt", ["create_agent", "create_react_agent"])
def test_the_result_of_a_tool_that_returns_directly_is_the_answer(
    evaluator: OnlineEvaluator, prebuilt: str
) -> None:
    # return_direct=True ends the run with the tool's result: the state's last message is
    # the tool's, and the answer read from the last AI message (which only asked for the
    # call) was empty, so coherence passed it as "empty output: coherence assumed"
    build = create_agent if prebuilt == "create_agent" else create_react_agent
    state = answered_by_its_tool(build).invoke(
        {"messages": [("user", "Where is order A-1?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    answer = ORDER_STATUS
    assert state["messages"][-1].content == answer
    [trace] = evaluator.captured()
    assert (trace.input, trace.output, trace.status) == (
        "Where is order A-1?",
        answer,
        RunStatus.OK,
    )
    coherence = Coherence().measure(trace)
    request, reply = default_embedder().embed([trace.input, answer])
    cosine = float(request @ reply)  # both rows L2-normalised
    assert coherence.score == pytest.approx(cosine, abs=1e-6)
    assert coherence.reason == f"cosine distance between input and output {1 - cosine:.4f}"


def _down(messages: Any) -> AIMessage:
    raise ConnectionError("model API overloaded (529)")


@pytest.mark.parametrize("middleware", ["fallback", "retry"])
def test_a_model_call_that_failed_and_was_made_again_is_no_step(
    evaluator: OnlineEvaluator, middleware: str
) -> None:
    # ModelFallbackMiddleware asks another model when the first fails, ModelRetryMiddleware
    # the same one again: each failed call opened a step of its own, so a judge read four
    # steps (two empty) for two turns and step_ratio counted them
    from langchain.agents.middleware import ModelFallbackMiddleware, ModelRetryMiddleware

    turns = [
        AIMessage("", tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")]),
        AIMessage("A-1 has shipped."),
    ]
    if middleware == "fallback":
        model = ScriptedChatModel(reply=_down, model_name="primary")
        guard: Any = ModelFallbackMiddleware(ScriptedChatModel(replies=turns, model_name="backup"))
    else:
        script = iter([None, turns[0], None, turns[1]])  # None: the call fails

        def flaky(messages: Any) -> AIMessage:
            return next(script) or _down(messages)

        model = ScriptedChatModel(reply=flaky, model_name="primary")
        guard = ModelRetryMiddleware(max_retries=1, initial_delay=0, jitter=False)
    agent = create_agent(model, tools=[lookup_order], middleware=[guard])
    agent.invoke(
        {"messages": [("user", "Where is A-1?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    answered = "primary" if middleware == "retry" else "backup"
    failed = "ConnectionError: model API overloaded (529)"
    assert [(s.name, s.output, s.error) for s in trace.spans_of(SpanKind.LLM)] == [
        ("primary", None, failed),
        (answered, "", None),
        ("primary", None, failed),
        (answered, "A-1 has shipped.", None),
    ]
    assert [
        (step.output, [(c.name, c.arguments) for c in step.tool_calls]) for step in trace.steps()
    ] == [
        (None, [("lookup_order", {"order_id": "A-1"})]),
        ("A-1 has shipped.", []),
    ]
    assert (trace.status, trace.output) == (RunStatus.OK, "A-1 has shipped.")


def test_a_middlewares_own_model_calls_are_no_steps(evaluator: OnlineEvaluator) -> None:
    # SummarizationMiddleware asks a model to summarise the history before the agent's
    # turn, LLMToolSelectorMiddleware one to choose the tools it is offered: each call was a
    # step (a judge read the summary as the agent's output), and the selector's schema was
    # listed among the agent's tools
    from langchain.agents.middleware import LLMToolSelectorMiddleware, SummarizationMiddleware

    @tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    summary = "The user asked about order A-0 before."
    summarizer = ScriptedChatModel(replies=[AIMessage(summary)], model_name="summarizer")
    choice = tool_call("ToolSelectionResponse", "s1", tools=["lookup_order"])
    selector = ScriptedChatModel(
        replies=[AIMessage("", tool_calls=[choice])], model_name="selector"
    )
    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")]),
            AIMessage("A-1 has shipped."),
        ]
    )
    agent = create_agent(
        model,
        tools=[lookup_order, refund],
        middleware=[
            SummarizationMiddleware(summarizer, trigger=("messages", 4), keep=("messages", 2)),
            LLMToolSelectorMiddleware(model=selector, max_tools=1),
        ],
    )
    history = [("user", "Where is A-0?"), ("ai", "A-0 is late."), ("user", "Thanks.")]
    agent.invoke(
        {"messages": [*history, ("user", "Where is A-1?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    calls = [
        (s.name, s.output, s.attributes.get(INTERNAL_CALL)) for s in trace.spans_of(SpanKind.LLM)
    ]
    assert calls == [
        ("summarizer", summary, True),
        ("selector", "", True),
        ("scripted-model", "", None),
        ("summarizer", summary, True),
        ("selector", "", True),
        ("scripted-model", "A-1 has shipped.", None),
    ]
    assert [
        (step.output, [(c.name, c.arguments) for c in step.tool_calls]) for step in trace.steps()
    ] == [
        (None, [("lookup_order", {"order_id": "A-1"})]),
        ("A-1 has shipped.", []),
    ]
    # the tools the agent was offered: the selector left refund out
    assert [spec.name for spec in trace.tools] == ["lookup_order"]
    assert (trace.input, trace.output) == ("Where is A-1?", "A-1 has shipped.")


def test_model_calls_in_a_middlewares_hooks_and_decision_models_are_no_steps(
    evaluator: OnlineEvaluator,
) -> None:
    # a model call in a middleware's hook (a guard in before_model asking whether the
    # request is safe, ModelRouterMiddleware choosing the model before the agent), or a
    # decision model's (AutoModeMiddleware asking whether a call is risky, in the tool
    # node) is not marked by LangChain: each was a step, and a judge read "SAFE" as the
    # agent's output
    from langchain.agents.middleware import (
        AgentMiddleware,
        AutoModeMiddleware,
        ModelChoice,
        ModelRouterMiddleware,
    )

    checker = ScriptedChatModel(replies=[AIMessage("SAFE")], model_name="checker")

    class SafetyCheck(AgentMiddleware):
        def before_model(self, state: Any, runtime: Any) -> None:
            checker.invoke(f"Is this safe? {state['messages'][-1].content}")

    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")]),
            AIMessage("A-1 has shipped."),
        ]
    )
    with pytest.warns(Warning, match="beta"):
        router = ModelRouterMiddleware(
            choices={"fast": ModelChoice(model=model, criteria="every task")},
            instructions="Choose a model.",
            classifier=Classifier(llm=checker),
        )
    agent = create_agent(
        model,
        tools=[lookup_order],
        middleware=[
            SafetyCheck(),
            router,
            AutoModeMiddleware(tools=["lookup_order"], classifier=Classifier(llm=checker)),
        ],
    )
    agent.invoke(
        {"messages": [("user", "Where is A-1?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    parents = {s.id: s.name for s in trace.spans}
    calls = [
        (parents[s.parent_id], s.name, s.output, s.attributes.get(INTERNAL_CALL))
        for s in trace.spans_of(SpanKind.LLM)
    ]
    assert calls == [
        ("Classifier", "checker", "SAFE", True),  # the router's, before the agent
        ("SafetyCheck.before_model", "checker", "SAFE", True),
        ("model", "scripted-model", "", None),
        ("Classifier", "checker", "SAFE", True),  # the risk check, in the tool node
        ("SafetyCheck.before_model", "checker", "SAFE", True),
        ("model", "scripted-model", "A-1 has shipped.", None),
    ]
    assert [
        (step.output, [(c.id, c.arguments, c.result) for c in step.tool_calls])
        for step in trace.steps()
    ] == [
        (None, [("c1", {"order_id": "A-1"}, "shipped")]),
        ("A-1 has shipped.", []),
    ]
    assert describe_trace(EvalCase.of(trace)).splitlines() == [
        "user input: Where is A-1?",
        'step 1 tool call: lookup_order({"order_id": "A-1"}) -> result: shipped',
        "step 2 output: A-1 has shipped.",
        "final answer: A-1 has shipped.",
    ]


@pytest.mark.parametrize("stop_on_loop", [False, True], ids=["alert", "stop"])
def test_an_agent_asking_again_and_again_for_a_tool_it_lacks_is_a_loop(
    evaluator: OnlineEvaluator, stop_on_loop: bool
) -> None:
    # no tool runs for a tool the agent does not have (the tool node answers each call
    # with an error), so no tool start came for the guard to ask at: with stop_on_loop the
    # agent asking for track_parcel six times was never alerted or stopped, where the
    # alert without it came at the third, and tool_call_loops scored the run 0.0
    from agenteval_langchain import AgentLoopError

    asks = [
        AIMessage(content="", tool_calls=[tool_call("track_parcel", f"t{n}", order_id="A-1")])
        for n in range(6)
    ]
    agent = create_agent(
        ScriptedChatModel(replies=[*asks, AIMessage(content="I could not track it.")]),
        tools=[lookup_order],
    )
    alerts: list[Any] = []
    evaluator.engine.sinks.append(CallbackSink(on_alert=alerts.append))
    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=stop_on_loop)
    with pytest.raises(AgentLoopError) if stop_on_loop else contextlib.nullcontext():
        agent.invoke({"messages": [("user", "Track A-1")]}, config={"callbacks": [handler]})
    [trace] = evaluator.captured()
    message = 'track_parcel called 3 times with the same arguments {"order_id": "A-1"}'
    assert [(a.message, a.stopped, [c.id for c in a.calls]) for a in alerts] == [
        (message, stop_on_loop, ["t0", "t1", "t2"])
    ]
    unknown = "Error: track_parcel is not a valid tool, try one of [lookup_order]."
    made = [
        (c.id, c.error, s.attributes.get(TOOL_NOT_RUN), s.attributes.get(GUARD_REFUSED))
        for s in trace.spans_of(SpanKind.TOOL)
        for c in [s.tool_call]
        if c is not None
    ]
    if stop_on_loop:  # the third refused as its model call ends, before the tool node
        assert made == [
            ("t0", unknown, True, None),
            ("t1", unknown, True, None),
            ("t2", f"refused by the loop guard: {message}", None, True),
        ]
        assert (trace.status, trace.status_reason) == (
            RunStatus.STOPPED,
            f"stopped by the loop guard: {message}",
        )
    else:
        assert made == [(f"t{n}", unknown, True, None) for n in range(6)]
        assert (trace.status, trace.output) == (RunStatus.OK, "I could not track it.")
    assert ToolCallLoops().measure(trace).reason == message


def test_a_call_the_tool_node_answered_without_a_tool_is_a_failed_call(
    evaluator: OnlineEvaluator,
) -> None:
    # a call of a tool the agent does not have, or one a middleware blocked
    # (AutoModeMiddleware), is answered by the tool node with an error message and runs
    # no tool: no tool event came, so the trace had no such call and tool_failures passed
    from langchain.agents.middleware import AutoModeMiddleware

    @tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    checker = ScriptedChatModel(replies=[AIMessage("RISKY")], model_name="checker")
    model = ScriptedChatModel(
        replies=[
            AIMessage(
                "",
                tool_calls=[
                    tool_call("track_parcel", "c1", order_id="A-1"),
                    tool_call("refund", "c2", order_id="A-1"),
                ],
            ),
            AIMessage("", tool_calls=[tool_call("lookup_order", "c3", order_id="A-1")]),
            AIMessage("A-1 has shipped."),
        ]
    )
    agent = create_agent(
        model,
        tools=[lookup_order, refund],
        middleware=[
            AutoModeMiddleware(tools=["refund"], classifier=Classifier(llm=checker, risk=0.9))
        ],
    )
    agent.invoke(
        {"messages": [("user", "Where is A-1?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    unknown = "Error: track_parcel is not a valid tool, try one of [lookup_order, refund]."
    blocked = (
        "The tool call `refund` was blocked because it was classified as risky "
        "(probability: 0.90). The tool was not executed."
    )
    # create_agent runs each call of a reply in a tool node of its own, side by side
    assert sorted(
        (c.id, c.name, c.arguments, c.result, c.error, s.attributes.get("agenteval.tool.not_run"))
        for s in trace.spans_of(SpanKind.TOOL)
        for c in [s.tool_call]
        if c is not None
    ) == [
        ("c1", "track_parcel", {"order_id": "A-1"}, unknown, unknown, True),
        ("c2", "refund", {"order_id": "A-1"}, blocked, blocked, True),
        ("c3", "lookup_order", {"order_id": "A-1"}, "shipped", None, None),
    ]
    assert [(s.output, sorted(c.id for c in s.tool_calls)) for s in trace.steps()] == [
        (None, ["c1", "c2"]),
        (None, ["c3"]),
        ("A-1 has shipped.", []),
    ]
    # two of three calls failed, each followed by a call of another tool: 1 - 2 / (2 * 3)
    failures = ToolFailures().measure(trace)
    assert failures.score == pytest.approx(2 / 3)
    assert sorted(
        (f["name"], f["arguments"], f["error"], f["recovered"])
        for f in failures.metadata["failures"]
    ) == [
        ("refund", {"order_id": "A-1"}, blocked, True),
        ("track_parcel", {"order_id": "A-1"}, unknown, True),
    ]


def test_a_model_call_a_tool_makes_is_the_tools_work_not_a_step(
    evaluator: OnlineEvaluator,
) -> None:
    # a tool that asks a model (here a summariser) makes its call inside the tool's run:
    # that call was a step of the agent, and a judge read the tool's summary as the
    # agent's own output
    summarizer = ScriptedChatModel(
        replies=[AIMessage("The parcel left the depot.")], model_name="summarizer"
    )

    @tool
    def summarize_tracking(order_id: str) -> str:
        """Summarise the tracking history of an order."""
        return str(summarizer.invoke(f"Summarise the tracking of {order_id}").content)

    model = ScriptedChatModel(
        replies=[
            AIMessage("", tool_calls=[tool_call("summarize_tracking", "c1", order_id="A-1")]),
            AIMessage("A-1 left the depot."),
        ]
    )
    agent = create_agent(model, tools=[summarize_tracking])
    agent.invoke(
        {"messages": [("user", "Where is A-1?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    parents = {s.id: s for s in trace.spans}
    assert [(s.name, parents[s.parent_id].kind) for s in trace.spans_of(SpanKind.LLM)] == [
        ("scripted-model", SpanKind.CHAIN),
        ("summarizer", SpanKind.TOOL),  # in the trace, and in its token counts
        ("scripted-model", SpanKind.CHAIN),
    ]
    assert describe_trace(EvalCase.of(trace)).splitlines() == [
        "user input: Where is A-1?",
        'step 1 tool call: summarize_tracking({"order_id": "A-1"}) -> result: The parcel left '
        "the depot.",
        "step 2 output: A-1 left the depot.",
        "final answer: A-1 left the depot.",
    ]


def test_a_call_over_a_call_limit_middlewares_limit_is_a_failed_call(
    evaluator: OnlineEvaluator,
) -> None:
    # ToolCallLimitMiddleware(exit_behavior="continue") answers the calls over its limit
    # itself, in its hook after the model, and the run goes on: no tool event came, so the
    # trace had only the calls that ran, and tool_failures passed the run
    from langchain.agents.middleware import ToolCallLimitMiddleware

    model = ScriptedChatModel(
        replies=[
            AIMessage(
                "",
                tool_calls=[
                    tool_call("lookup_order", f"c{i}", order_id=f"A-{i}") for i in range(3)
                ],
            ),
            AIMessage("A-0 and A-1 have shipped."),
        ]
    )
    agent = create_agent(
        model,
        tools=[lookup_order],
        middleware=[ToolCallLimitMiddleware(run_limit=2, exit_behavior="continue")],
    )
    agent.invoke(
        {"messages": [("user", "Where are A-0, A-1 and A-2?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    refused = "Tool call limit exceeded. Do not make additional tool calls."
    assert sorted(
        (c.id, c.arguments, c.result, c.error, s.attributes.get("agenteval.tool.not_run"))
        for s in trace.spans_of(SpanKind.TOOL)
        for c in [s.tool_call]
        if c is not None
    ) == [
        ("c0", {"order_id": "A-0"}, "shipped", None, None),
        ("c1", {"order_id": "A-1"}, "shipped", None, None),
        ("c2", {"order_id": "A-2"}, refused, refused, True),
    ]
    # the call the hook answered is the agent's, in the step that asked for it
    assert [(s.output, sorted(c.id for c in s.tool_calls)) for s in trace.steps()] == [
        (None, ["c0", "c1", "c2"]),
        ("A-0 and A-1 have shipped.", []),
    ]
    assert (trace.status, trace.output) == (RunStatus.OK, "A-0 and A-1 have shipped.")


@pytest.mark.parametrize("name", ["researcher", None])
def test_an_agent_a_tool_runs_is_an_agent_of_the_run(
    evaluator: OnlineEvaluator, name: str | None
) -> None:
    # a sub-agent called as a tool: unlike a tool's own model call, its steps are the run's,
    # named or not (an unnamed graph inside the agent's graph is a part of it; inside a
    # tool, an agent the tool called)
    researcher = create_agent(
        ScriptedChatModel(
            replies=[
                AIMessage("", tool_calls=[tool_call("lookup_order", "r1", order_id="A-1")]),
                AIMessage("A-1 shipped on Monday."),
            ],
            model_name="researcher",
        ),
        tools=[lookup_order],
        name=name,
    )

    @tool
    def research(question: str) -> str:
        """Ask the research agent."""
        return str(researcher.invoke({"messages": [("user", question)]})["messages"][-1].content)

    boss = create_agent(
        ScriptedChatModel(
            replies=[
                AIMessage("", tool_calls=[tool_call("research", "c1", question="Where is A-1?")]),
                AIMessage("It shipped on Monday."),
            ]
        ),
        tools=[research],
    )
    boss.invoke(
        {"messages": [("user", "When did A-1 ship?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    [tool_span] = [s for s in trace.spans_of(SpanKind.TOOL) if s.name == "research"]
    [sub_agent] = [s for s in trace.spans if s.parent_id == tool_span.id]
    assert (sub_agent.kind, sub_agent.name, sub_agent.input) == (
        SpanKind.AGENT,
        name or "LangGraph",
        "Where is A-1?",
    )
    assert sub_agent.attributes.get("gen_ai.agent.name") == name
    assert [(step.output, [c.id for c in step.tool_calls]) for step in trace.steps()] == [
        (None, ["c1"]),
        (None, ["r1"]),  # the sub-agent's
        ("A-1 shipped on Monday.", []),
        ("It shipped on Monday.", []),
    ]


def test_a_tool_call_a_model_answered_in_the_tools_place_is_a_call(
    evaluator: OnlineEvaluator,
) -> None:
    # LLMToolEmulator (for testing an agent without its tools) answers a call with a model
    # and never runs the tool, so no tool event came: the trace had no tool call, and
    # tool_failures passed it on "no tool calls"
    from langchain.agents.middleware import LLMToolEmulator

    @tool
    def weather(city: str) -> str:
        """Current weather for a city."""
        return "sunny"

    emulator = ScriptedChatModel(replies=[AIMessage("rainy, 12°C")], model_name="emulator")
    model = ScriptedChatModel(
        replies=[
            AIMessage(
                "",
                tool_calls=[
                    tool_call("weather", "w1", city="Paris"),
                    tool_call("lookup_order", "c1", order_id="A-1"),
                ],
            ),
            AIMessage("Rainy in Paris; A-1 has shipped."),
        ]
    )
    agent = create_agent(
        model,
        tools=[weather, lookup_order],
        middleware=[LLMToolEmulator(tools=["weather"], model=emulator)],
    )
    agent.invoke(
        {"messages": [("user", "Weather in Paris, and where is A-1?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    emulated = {"agenteval.tool.emulated": True}
    calls = [
        (s.tool_call.id, s.tool_call.name, s.tool_call.arguments, s.tool_call.result, s.attributes)
        for s in trace.spans
        if s.tool_call is not None
    ]
    assert sorted(calls) == [
        ("c1", "lookup_order", {"order_id": "A-1"}, "shipped", {}),
        ("w1", "weather", {"city": "Paris"}, "rainy, 12°C", emulated),
    ]
    [(answered, internal)] = [
        (s.output, s.attributes.get(INTERNAL_CALL)) for s in trace.spans if s.name == "emulator"
    ]
    assert (answered, internal) == ("rainy, 12°C", True)
    first, last = trace.steps()
    assert sorted(c.id for c in first.tool_calls) == ["c1", "w1"]
    assert (last.output, last.tool_calls) == ("Rainy in Paris; A-1 has shipped.", [])
    checked = create_metric("tool_failures").measure(trace)
    assert (checked.score, checked.reason) == (1.0, "none of 2 tool calls failed")


def test_a_run_resumed_from_its_checkpoint_after_a_failure_has_its_request(
    evaluator: OnlineEvaluator,
) -> None:
    # LangGraph's durable execution: after a failure, invoke(None, config) goes on from the
    # thread's checkpoint. The resumed run's input was None, so coherence gave it its
    # perfect score for an empty input ("coherence assumed")
    down = [True]

    @tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        if down[0]:
            raise ConnectionError("orders API down")
        return f"{order_id} shipped"

    script = [
        AIMessage("", tool_calls=[tool_call("lookup", "c1", order_id="A-1")]),
        AIMessage("A-1 has shipped."),
    ]
    agent = create_agent(
        ScriptedChatModel(replies=script), tools=[lookup], checkpointer=InMemorySaver()
    )
    handler = AgentEvalCallbackHandler(evaluator)
    config: Any = {"callbacks": [handler], "configurable": {"thread_id": "t-3"}}
    with pytest.raises(ConnectionError):
        agent.invoke({"messages": [("user", "Where is A-1?")]}, config=config)
    down[0] = False
    assert agent.invoke(None, config=config)["messages"][-1].content == "A-1 has shipped."
    # a new request on the thread afterwards is a run of its own, not a resumption
    agent.invoke({"messages": [("user", "Thanks!")]}, config=config)
    failed, resumed, later = evaluator.captured()
    assert (failed.input, failed.status, failed.output) == ("Where is A-1?", RunStatus.ERROR, None)
    assert (resumed.input, resumed.status, resumed.output) == (
        "Where is A-1?",
        RunStatus.OK,
        "A-1 has shipped.",
    )
    assert resumed.metadata == {"thread_id": "t-3", "resumes_trace_id": failed.id}
    assert [(c.id, c.result, c.error) for c in resumed.tool_calls()] == [
        ("c1", "A-1 shipped", None)
    ]
    assert (later.input, "resumes_trace_id" in later.metadata) == ("Thanks!", False)


def test_a_run_from_a_checkpoint_this_handler_did_not_see_has_its_request(
    evaluator: OnlineEvaluator, tmp_path: Path
) -> None:
    # invoke(None, config) from a checkpoint whose run the handler never saw ended
    # unfinished: a fork from an earlier checkpoint (time travel), or a new process going
    # on after a crash. Its input was None: coherence's perfect score for an empty input
    script = [
        AIMessage("", tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")]),
        AIMessage("A-1 has shipped."),
        AIMessage("", tool_calls=[tool_call("lookup_order", "c2", order_id="A-1")]),
        AIMessage("A-1 has shipped, as before."),
    ]
    agent = create_agent(
        ScriptedChatModel(replies=script), tools=[lookup_order], checkpointer=InMemorySaver()
    )
    thread: Any = {"configurable": {"thread_id": "t-4"}}
    handler = AgentEvalCallbackHandler(evaluator)
    agent.invoke({"messages": [("user", "Where is A-1?")]}, {**thread, "callbacks": [handler]})
    # the checkpoint where the model was about to answer the request
    fork = next(s for s in reversed(list(agent.get_state_history(thread))) if s.next == ("model",))
    answered = agent.invoke(None, {**fork.config, "callbacks": [handler]})
    assert answered["messages"][-1].content == "A-1 has shipped, as before."
    first, forked = evaluator.captured()
    assert first.input == forked.input == forked.spans[0].input == "Where is A-1?"
    assert (forked.output, forked.status) == ("A-1 has shipped, as before.", RunStatus.OK)
    assert [(c.id, c.arguments) for c in forked.tool_calls()] == [("c2", {"order_id": "A-1"})]
    scored = create_metric("coherence").measure(forked)
    assert scored.reason.startswith("cosine distance between input and output")

    # a run that failed, resumed by another handler (a new process after a crash)
    down = [True]

    @tool
    def flaky_lookup(order_id: str) -> str:
        """Look up an order."""
        if down[0]:
            raise ConnectionError("orders API down")
        return "shipped"

    script = [
        AIMessage("", tool_calls=[tool_call("flaky_lookup", "c3", order_id="A-2")]),
        AIMessage("A-2 has shipped."),
    ]
    agent = create_agent(
        ScriptedChatModel(replies=script), tools=[flaky_lookup], checkpointer=InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "t-5"}}
    with pytest.raises(ConnectionError):
        agent.invoke({"messages": [("user", "And A-2?")]}, thread)  # no handler saw it
    down[0] = False
    with OnlineEvaluator(capture=tmp_path / "after_restart.jsonl", log=False) as restarted:
        agent.invoke(None, {**thread, "callbacks": [AgentEvalCallbackHandler(restarted)]})
        [resumed] = restarted.captured()
    assert (resumed.input, resumed.output, resumed.status) == (
        "And A-2?",
        "A-2 has shipped.",
        RunStatus.OK,
    )


@pytest.mark.parametrize(
    ("provider", "metadata"),
    [
        ("openai", {"finish_reason": "length"}),
        ("anthropic", {"stop_reason": "max_tokens"}),
        ("google", {"finish_reason": "MAX_TOKENS"}),
    ],
)
def test_an_answer_cut_at_the_token_limit_is_no_completed_run(
    evaluator: OnlineEvaluator, provider: str, metadata: dict[str, str]
) -> None:
    # the model stopped mid-sentence at its output token limit: the run read as completed,
    # and its half answer was scored (and passed a suite) as the answer
    script = [
        AIMessage(content="", tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")]),
        AIMessage("A-1 has shipped and should arrive", response_metadata=metadata),
    ]
    agent = create_agent(ScriptedChatModel(replies=script), tools=[lookup_order])
    agent.invoke(
        {"messages": [("user", "Where is A-1?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    [reason] = metadata.values()
    assert [
        s.attributes.get("gen_ai.response.finish_reasons") for s in trace.spans_of(SpanKind.LLM)
    ] == [
        None,
        [reason],
    ]
    assert (trace.status, trace.status_reason, trace.output) == (
        RunStatus.LIMIT,
        f"the answer was cut at the model's output token limit (finish reason {reason})",
        "A-1 has shipped and should arrive",
    )
    assert not trace.completed  # a suite fails the attempt; `agenteval cases` selects it


def test_an_answer_the_model_finished_is_a_completed_run(evaluator: OnlineEvaluator) -> None:
    finished = {"finish_reason": "stop"}
    script = [AIMessage("A-1 has shipped.", response_metadata=finished)]
    agent = create_agent(ScriptedChatModel(replies=script), tools=[lookup_order])
    agent.invoke(
        {"messages": [("user", "Where is A-1?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    [call] = trace.spans_of(SpanKind.LLM)
    assert call.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert (trace.status, trace.status_reason) == (RunStatus.OK, None)


REFUSALS = {
    # what each provider's LangChain integration returns when the model refuses
    "openai": AIMessage(
        "",
        additional_kwargs={"refusal": "I can't help with picking locks."},
        response_metadata={"model_provider": "openai", "finish_reason": "stop"},
    ),
    "anthropic": AIMessage(
        [], response_metadata={"model_provider": "anthropic", "stop_reason": "refusal"}
    ),
    "google": AIMessage(
        "", response_metadata={"model_provider": "google_genai", "finish_reason": "SAFETY"}
    ),
}


@pytest.mark.parametrize("provider", list(REFUSALS))
def test_a_model_that_refused_to_answer_says_so(evaluator: OnlineEvaluator, provider: str) -> None:
    # a refusal is no text: the answer read as empty, and coherence and loop_detection gave
    # it their perfect score for an empty output ("coherence assumed")
    model = ScriptedChatModel(replies=[REFUSALS[provider]])
    agent = create_agent(model, tools=[lookup_order])
    agent.invoke(
        {"messages": [("user", "How do I pick a lock?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    said = "I can't help with picking locks." if provider == "openai" else ""
    [call] = trace.spans_of(SpanKind.LLM)
    assert (call.output, call.attributes.get(REFUSAL)) == (said, said)
    assert (trace.status, trace.output, trace.refusal()) == (RunStatus.OK, said, said)
    coherence = create_metric("coherence").measure(trace)
    if said:  # the refusal is the answer a metric scores
        assert coherence.status == "ok" and coherence.reason.startswith("cosine distance")
    else:
        assert (coherence.status, coherence.reason) == (
            "skipped",
            "not scored: the model refused to answer",
        )
    # and what a judge is told of the run
    told = "the model refused to answer" + (f": {said}" if said else "")
    assert describe_trace(EvalCase.of(trace)).splitlines()[-1] == told


def test_a_refusal_a_fallback_model_answered_in_its_place_is_no_step(
    evaluator: OnlineEvaluator,
) -> None:
    # ModelRefusalMiddleware raised the refusal inside the model node and
    # ModelFallbackMiddleware asked the next model: the refused call, no failure to
    # LangChain's callbacks, was a step of the run ("step 1 output: I can't help with
    # picking locks."), as if the agent had said so before it answered
    from langchain.agents.middleware import ModelFallbackMiddleware, ModelRefusalMiddleware

    answer = "Call a locksmith: they can open it without damage."
    backup = ScriptedChatModel(replies=[AIMessage(answer)])
    agent = create_agent(
        ScriptedChatModel(replies=[REFUSALS["openai"]]),
        tools=[lookup_order],
        middleware=[ModelFallbackMiddleware(backup), ModelRefusalMiddleware()],
    )
    agent.invoke(
        {"messages": [("user", "I'm locked out of my house.")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    refused, answered = trace.spans_of(SpanKind.LLM)
    assert (refused.attributes.get(REFUSAL), answered.output) == (
        "I can't help with picking locks.",
        answer,
    )  # both calls recorded as they were
    assert (trace.status, trace.output, trace.refusal()) == (RunStatus.OK, answer, None)
    assert trace.steps() == [AgentStep(output=answer)]
    assert describe_trace(EvalCase.of(trace)) == (
        f"user input: I'm locked out of my house.\nstep 1 output: {answer}\nfinal answer: {answer}"
    )


@pytest.mark.parametrize("limited", [False, True], ids=["answers", "max_iterations"])
def test_a_classic_agent_executor_run(evaluator: OnlineEvaluator, limited: bool) -> None:
    # langchain-classic's AgentExecutor, which many existing agents still run: its trace
    # took the executor's dicts as request and answer ({"input": ...}, {"output": ...}),
    # its tool calls had no ids, and a run it stopped at max_iterations (answering "Agent
    # stopped due to max iterations.") read as ok
    from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
    from langchain_core.prompts import ChatPromptTemplate

    asks = [
        AIMessage("", tool_calls=[tool_call("lookup_order", f"c{i}", order_id="A-1")])
        for i in range(3)
    ]
    model = ScriptedChatModel(
        replies=[*asks, AIMessage("A-1 has shipped.")]
        if limited
        else [asks[0], AIMessage("A-1 has shipped.")]
    )
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "You answer about orders."),
            ("human", "{input}"),
            ("placeholder", "{agent_scratchpad}"),
        ]
    )
    executor = AgentExecutor(
        agent=create_tool_calling_agent(model, [lookup_order], prompt),
        tools=[lookup_order],
        max_iterations=2,
    )
    result = executor.invoke(
        {"input": "Where is A-1?"}, {"callbacks": [AgentEvalCallbackHandler(evaluator)]}
    )
    [trace] = evaluator.captured()
    answer = "Agent stopped due to max iterations." if limited else "A-1 has shipped."
    assert result["output"] == answer
    assert (trace.input, trace.output, trace.status, trace.status_reason) == (
        "Where is A-1?",
        answer,
        RunStatus.LIMIT if limited else RunStatus.OK,
        answer if limited else None,
    )
    ran = 2 if limited else 1
    assert [(c.id, c.name, c.arguments, c.result) for c in trace.tool_calls()] == [
        (f"c{i}", "lookup_order", {"order_id": "A-1"}, "shipped") for i in range(ran)
    ]


def test_a_classic_react_agents_unparsed_reply_is_no_tool_call(evaluator: OnlineEvaluator) -> None:
    # with handle_parsing_errors, a classic AgentExecutor answers a reply it cannot parse by
    # "running" a tool named _Exception that hands the model the parsing error: that was
    # recorded as a call of a tool the agent does not have, which succeeded
    from langchain_classic.agents import AgentExecutor, create_react_agent
    from langchain_core.language_models.fake import FakeListLLM
    from langchain_core.prompts import PromptTemplate

    model = FakeListLLM(
        responses=[
            "I think it shipped",  # no Action: the executor cannot parse it
            "Thought: check it\nAction: lookup_order\nAction Input: A-1",
            "Thought: done\nFinal Answer: A-1 has shipped.",
        ]
    )
    prompt = PromptTemplate.from_template(
        "Tools: {tools} ({tool_names})\nQuestion: {input}\n{agent_scratchpad}"
    )
    executor = AgentExecutor(
        agent=create_react_agent(model, [lookup_order], prompt),
        tools=[lookup_order],
        handle_parsing_errors=True,
    )
    executor.invoke(
        {"input": "Where is A-1?"}, {"callbacks": [AgentEvalCallbackHandler(evaluator)]}
    )
    [trace] = evaluator.captured()
    # a ReAct tool's text input, as LangChain's callbacks give it (no schema comes with it)
    assert [(c.name, c.arguments, c.result, c.error) for c in trace.tool_calls()] == [
        ("lookup_order", {"input": "A-1"}, "shipped", None)
    ]
    told = "Invalid Format: Missing 'Action:' after 'Thought:'"
    [unparsed] = [s for s in trace.spans if s.name == "unparsed reply"]
    assert (unparsed.kind, unparsed.output, unparsed.error) == (SpanKind.CHAIN, told, told)
    assert (trace.output, trace.status) == ("A-1 has shipped.", RunStatus.OK)
    # a completion model, given the prompt as text (it was recorded as a chat)
    calls = trace.spans_of(SpanKind.LLM)
    assert [s.attributes["gen_ai.operation.name"] for s in calls] == ["text_completion"] * 3
    [prompt] = calls[0].input
    assert prompt.startswith("Tools: lookup_order") and "Question: Where is A-1?" in prompt


def test_a_classic_agent_that_answers_with_a_dict_keeps_it(evaluator: OnlineEvaluator) -> None:
    from langchain_classic.agents import AgentExecutor, BaseSingleActionAgent
    from langchain_core.agents import AgentFinish

    answer = {"order": "A-1", "status": "shipped"}

    class Structured(BaseSingleActionAgent):
        @property
        def input_keys(self) -> list[str]:
            return ["input"]

        def plan(self, intermediate_steps: Any, callbacks: Any = None, **kwargs: Any) -> Any:
            return AgentFinish({"output": answer}, "")

        async def aplan(self, intermediate_steps: Any, callbacks: Any = None, **kwargs: Any) -> Any:
            return self.plan(intermediate_steps)

    executor = AgentExecutor(agent=Structured(), tools=[])
    executor.invoke(
        {"input": "Where is A-1?"}, {"callbacks": [AgentEvalCallbackHandler(evaluator)]}
    )
    [trace] = evaluator.captured()
    assert (trace.input, trace.output, trace.status) == ("Where is A-1?", answer, RunStatus.OK)
    # an answer that is no text is no stop of the executor's: the event was read whole
    assert trace.metadata["agent_finish"] == {"output": {"output": answer}, "log": ""}
    assert not evaluator.stats.problems


@pytest.mark.parametrize("by_arguments", [False, True])
def test_a_functional_api_agent_has_the_request_and_the_answer(
    evaluator: OnlineEvaluator, by_arguments: bool
) -> None:
    # an @entrypoint agent is given a list of messages and answers with a message: the
    # trace's input and output were those structures, which metrics and judges read as JSON.
    # A task that gives each tool the call's arguments alone and makes its answer by hand
    # ran each call without its id: each was in the trace twice, the run and a call "no tool
    # ran" for the answer (tool_failures read four calls)
    answer = functional_agent(by_arguments).invoke(
        [{"role": "user", "content": "Where are A-1 and Z-9?"}],
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    assert answer.content == "A-1 has shipped; I could not find order Z-9."
    [trace] = evaluator.captured()
    assert (trace.input, trace.output, trace.status) == (
        "Where are A-1 and Z-9?",
        "A-1 has shipped; I could not find order Z-9.",
        RunStatus.OK,
    )
    assert sorted((c.id, c.arguments, c.result, c.error) for c in trace.tool_calls()) == [
        ("c1", {"order_id": "A-1"}, "shipped", None),
        ("c2", {"order_id": "Z-9"}, "Error: no order Z-9", "ValueError: no order Z-9"),
    ]
    assert not any(s.attributes.get(TOOL_NOT_RUN) for s in trace.spans)
    asked, answered = trace.steps()
    assert sorted(c.id for c in asked.tool_calls) == ["c1", "c2"]
    assert (answered.output, answered.tool_calls) == (
        "A-1 has shipped; I could not find order Z-9.",
        [],
    )
    # the failed call, owned up to in the answer: 1 − (1 + 0) / (2 × 2) = 0.75
    assert ToolFailures().measure(trace).score == 0.75


def test_sub_agents_a_graph_fans_out_to_keep_their_own_steps(evaluator: OnlineEvaluator) -> None:
    # a graph sends each order to a sub-agent at once (LangGraph's Send): their steps
    # interleave, and each tool call joined whichever step had opened last, another
    # agent's (a judge read B-2's lookup as the step that answered "shipped")
    @tool
    def order_status(order_id: str) -> str:
        """Status of an order."""
        return {"A-1": "shipped", "B-2": "delayed"}[order_id]

    def reply(messages: Any) -> AIMessage:
        if messages[-1].type == "tool":
            return AIMessage(str(messages[-1].content))
        order = str(messages[0].content).split()[-1]
        return AIMessage("", tool_calls=[tool_call("order_status", f"c-{order}", order_id=order)])

    checker = create_agent(
        ScriptedChatModel(reply=reply), tools=[order_status], name="order_checker"
    )

    state = sent_at_once(checker, "Check").invoke(
        {"items": ["A-1", "B-2"], "results": []},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    assert sorted(state["results"]) == ["delayed", "shipped"]
    [trace] = evaluator.captured()
    # each step with the calls its own model asked for, whatever order the agents ran in
    steps = sorted(((s.output or ""), [c.id for c in s.tool_calls]) for s in trace.steps())
    assert steps == [("", ["c-A-1"]), ("", ["c-B-2"]), ("delayed", []), ("shipped", [])]


def pollers_sent_at_once(polls: dict[str, int], name: str | None = "poller") -> Any:
    """A graph that sends one poller per job at once (LangGraph's Send), each a
    ``create_agent`` agent named ``name``; the poller of job J checks it ``polls[J]`` times,
    and the checks start in turn (A, B, A, B, ...) once every poller has called its
    model."""
    turns = TakingTurns(polls)

    @tool
    def job_status(job: str) -> str:
        """Status of a deploy job."""
        return turns.checked(job)

    def reply(messages: Any) -> AIMessage:
        job = str(messages[0].content).split()[-1]
        check = turns.next_check(job, sum(message.type == "tool" for message in messages))
        if check is None:
            return AIMessage(f"{job} is done")
        return AIMessage("", tool_calls=[tool_call("job_status", check, job=job)])

    poller = create_agent(ScriptedChatModel(reply=reply), tools=[job_status], name=name)
    return sent_at_once(poller, "Watch")


def sent_at_once(agent: Any, verb: str) -> Any:
    """A graph that sends ``agent`` once per item of its state's ``items``, all at once
    (LangGraph's Send), each asked "<verb> <item>"; their answers in ``results``."""

    class Items(TypedDict):
        items: list[str]
        results: Annotated[list[str], operator.add]

    def run(state: dict[str, Any]) -> dict[str, Any]:
        return {"results": [agent.invoke(state)["messages"][-1].content]}

    graph = StateGraph(Items)
    graph.add_node("run", run)
    graph.add_conditional_edges(
        START,
        lambda state: [
            Send("run", {"messages": [("user", f"{verb} {i}")]}) for i in state["items"]
        ],
        ["run"],
    )
    graph.add_edge("run", END)
    return graph.compile()


@pytest.mark.parametrize("name", ["poller", None])
@pytest.mark.parametrize("stop_on_loop", [True, False])
def test_pollers_running_at_once_are_not_a_loop_and_one_that_loops_is(
    evaluator: OnlineEvaluator, stop_on_loop: bool, name: str | None
) -> None:
    # two pollers sent at once, each checking its own job twice: their calls, read as one
    # sequence, closed "cycle job_status → job_status": an alert, and with stop_on_loop=True
    # a stopped run, for a run that did its work. Unnamed pollers have no agent spans: each
    # is a task of one graph step that called a model, and has a lane as an agent does
    from agenteval_langchain import AgentLoopError

    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=stop_on_loop)
    state = pollers_sent_at_once({"A": 2, "B": 2}, name).invoke(
        {"items": ["A", "B"], "results": []}, {"callbacks": [handler]}
    )
    assert sorted(state["results"]) == ["A is done", "B is done"]
    # the poller of A checks it a third time while B's runs: its own loop
    looping = pollers_sent_at_once({"A": 4, "B": 2}, name)
    with (
        pytest.raises(AgentLoopError, match=r'job_status called 3 times .* \{"job": "A"\}')
        if stop_on_loop
        else contextlib.nullcontext()
    ):
        looping.invoke({"items": ["A", "B"], "results": []}, {"callbacks": [handler]})
    worked, looped = evaluator.captured()
    alert = assert_each_poller_loops_alone(worked, looped, stopped=stop_on_loop)
    assert (alert.pattern, [(c.id, c.arguments) for c in alert.calls]) == (
        "repeated_call",
        [("A1", {"job": "A"}), ("A2", {"job": "A"}), ("A3", {"job": "A"})],
    )


@pytest.mark.parametrize("name", ["checker", None])
@pytest.mark.parametrize("stop_on_loop", [True, False])
def test_agents_sent_at_once_keep_their_own_retries(
    evaluator: OnlineEvaluator, stop_on_loop: bool, name: str | None
) -> None:
    # two checkers of one name sent at once; A's check raised twice and its retry
    # middleware ran it again each time after B's model had been called. The agents were
    # told apart by name only, so B's model calls read as A's model asking again: three
    # calls where A's agent made one, two failures it had not recovered from, a loop alert,
    # and with stop_on_loop a stopped run that worked. Unnamed (no agent spans), they are
    # told apart as two tasks of one graph step
    from langchain.agents.middleware import wrap_tool_call

    failed = [threading.Event(), threading.Event()]  # A's first and second run raised
    b_asked = [threading.Event(), threading.Event()]  # B's model called after each
    runs: list[str] = []

    @tool
    def job_status(job: str) -> str:
        """Status of a deploy job."""
        runs.append(job)
        if job == "A" and runs.count("A") <= 2:
            failed[runs.count("A") - 1].set()
            raise ConnectionError("deploy API timed out")
        return f"{job} done" if job == "A" or runs.count("B") == 2 else f"{job} running"

    @wrap_tool_call
    def retry_twice(request: Any, handler: Any) -> Any:
        for retry in range(2):
            try:
                return handler(request)
            except ConnectionError:
                assert b_asked[retry].wait(10)  # B's model was called since this run
        return handler(request)

    def reply(messages: Any) -> AIMessage:
        job = str(messages[0].content).split()[-1]
        done = sum(message.type == "tool" for message in messages)
        if job == "B" and done:
            assert failed[done - 1].wait(10)
            b_asked[done - 1].set()
        if done and messages[-1].content == f"{job} done":
            return AIMessage(f"{job} done")
        return AIMessage("", tool_calls=[tool_call("job_status", f"c-{job}{done}", job=job)])

    checker = create_agent(
        ScriptedChatModel(reply=reply), tools=[job_status], middleware=[retry_twice], name=name
    )

    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=stop_on_loop)
    state = sent_at_once(checker, "Check").invoke(
        {"items": ["A", "B"], "results": []}, {"callbacks": [handler]}
    )
    assert sorted(state["results"]) == ["A done", "B done"]
    [trace] = evaluator.captured()
    assert (trace.status, trace.alerts) == (RunStatus.OK, [])
    every_run = [(c.id, c.result, c.error) for c in trace.tool_calls(every_run=True)]
    timed_out = ("c-A0", None, "ConnectionError: deploy API timed out")
    assert [run for run in every_run if run[0] == "c-A0"] == [
        timed_out,
        timed_out,
        ("c-A0", "A done", None),
    ]
    # A's agent made one call, its last run worked; B's made two
    assert sorted((c.id, c.result, c.error) for c in trace.tool_calls()) == [
        ("c-A0", "A done", None),
        ("c-B0", "B running", None),
        ("c-B1", "B done", None),
    ]
    failures = ToolFailures().measure(trace)
    assert (failures.score, failures.reason) == (
        1.0,
        "none of 3 tool calls failed (the framework ran a call again 2 times: each call "
        "counts as its last run)",
    )


@pytest.mark.parametrize("stop_on_loop", [True, False])
def test_nodes_sent_at_once_that_each_make_a_call_once_are_not_a_loop(
    evaluator: OnlineEvaluator, stop_on_loop: bool
) -> None:
    # a map-reduce graph sends three summarisers at once, each reading the style guide
    # once: three identical calls in one sequence were "style_guide called 3 times", and
    # with stop_on_loop=True the third summariser was stopped in a run that did its work
    from agenteval_langchain import AgentLoopError

    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=stop_on_loop)
    state = summarisers_sent_at_once({"a": 1, "b": 1, "c": 1}).invoke(
        {"docs": ["a", "b", "c"], "summaries": []}, {"callbacks": [handler]}
    )
    assert sorted(state["summaries"]) == [f"{d}: summarised (Short sentences.)" for d in "abc"]
    # the summariser of b reads it three times itself: its own loop
    with (
        pytest.raises(AgentLoopError, match=r"style_guide called 3 times with the same arguments")
        if stop_on_loop
        else contextlib.nullcontext()
    ):
        summarisers_sent_at_once({"a": 1, "b": 3, "c": 1}).invoke(
            {"docs": ["a", "b", "c"], "summaries": []}, {"callbacks": [handler]}
        )
    worked, looped = evaluator.captured()
    assert (worked.status, worked.alerts) == (RunStatus.OK, [])
    # each task of the step says its step, its calls under it
    tasks = [s for s in worked.spans if s.name == "summarise"]
    assert [s.attributes.get(GRAPH_STEP) for s in tasks] == [1, 1, 1]
    assert sorted(
        (c.parent_id, c.tool_call.name, c.tool_call.arguments)
        for c in worked.spans
        if c.tool_call is not None
    ) == sorted((s.id, "style_guide", {}) for s in tasks)
    loops = ToolCallLoops().measure(worked)
    assert (loops.score, loops.reason) == (1.0, "no repeated calls or cycles among 3 tool calls")
    [alert] = looped.alerts
    assert (alert.pattern, alert.count, alert.stopped) == ("repeated_call", 3, stop_on_loop)
    assert looped.status == (RunStatus.STOPPED if stop_on_loop else RunStatus.OK)
    if not stop_on_loop:  # scored as the live guard read it: b's three reads
        loops = ToolCallLoops().measure(looped)
        assert (loops.score, loops.metadata["loops"][0]["count"]) == (0.0, 3)


@pytest.mark.parametrize("stop_on_loop", [True, False])
def test_functional_api_tasks_on_other_input_are_not_a_loop_and_a_task_redone_is(
    evaluator: OnlineEvaluator, stop_on_loop: bool
) -> None:
    # the functional API: an @entrypoint that maps @task summarise over three parts (all
    # started at once, or one after another), each reading the style guide once, was
    # "style_guide called 3 times", and stop_on_loop=True stopped the run at the third
    # part. LangGraph tags no step on a task, and tasks started together carry what tasks
    # called in turn do. A task called again with the same input redoes its work: a poll
    from agenteval_langchain import AgentLoopError
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.func import entrypoint, task

    @task
    def summarise(part: str) -> str:
        return f"{part}: {style_guide.invoke({})}"

    @task
    def check(call: dict[str, Any]) -> str:  # the call the model asked for: a new id each time
        return str(job_status.invoke(call["args"]))

    @entrypoint(checkpointer=InMemorySaver())
    def at_once(parts: list[str]) -> list[str]:
        return [future.result() for future in [summarise(part) for part in parts]]

    @entrypoint(checkpointer=InMemorySaver())
    def in_turn(parts: list[str]) -> list[str]:
        return [summarise(part).result() for part in parts]

    @entrypoint(checkpointer=InMemorySaver())
    def polling(job: str) -> list[str]:
        asked = [tool_call("job_status", f"c{n}", job=job) for n in range(4)]
        return [check(call).result() for call in asked]

    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=stop_on_loop)
    for entry in (at_once, in_turn):
        config: Any = {"configurable": {"thread_id": entry.name}, "callbacks": [handler]}
        assert entry.invoke(["a", "b", "c"], config) == [f"{p}: Short sentences." for p in "abc"]
    config = {"configurable": {"thread_id": "polling"}, "callbacks": [handler]}
    with (
        pytest.raises(AgentLoopError, match=r"job_status called 3 times with the same arguments")
        if stop_on_loop
        else contextlib.nullcontext()
    ):
        polling.invoke("J1", config)
    *mapped, polled = evaluator.captured()
    for trace in mapped:
        assert (trace.status, trace.alerts) == (RunStatus.OK, [])
        tasks = [s for s in trace.spans if s.name == "summarise"]
        assert [s.attributes.get(GRAPH_STEP) for s in tasks] == [0, 0, 0]  # beside each other
        assert sorted((c.parent_id, c.tool_call.name) for c in trace.spans if c.tool_call) == (
            sorted((s.id, "style_guide") for s in tasks)
        )
        loops = ToolCallLoops().measure(trace)
        assert (loops.score, loops.reason) == (
            1.0,
            "no repeated calls or cycles among 3 tool calls",
        )
    checks = [s for s in polled.spans if s.name == "check"]
    assert [s.attributes.get(GRAPH_STEP) for s in checks] == [0, 1, 2, 3][: len(checks)]
    [alert] = polled.alerts
    assert (alert.pattern, alert.count, alert.stopped) == ("repeated_call", 3, stop_on_loop)
    assert polled.status == (RunStatus.STOPPED if stop_on_loop else RunStatus.OK)
    assert ToolCallLoops().measure(polled).score == 0.0


@pytest.mark.parametrize("failures", [2, 3])
def test_a_task_its_retry_policy_ran_again_made_its_call_once(
    evaluator: OnlineEvaluator, failures: int
) -> None:
    # an @task whose fetch timed out, run again by its retry policy on the same input: read
    # as the same work redone (a step later each time), its runs were three calls, two
    # failed in a run that worked (tool_failures 0.33), a loop alert, and stop_on_loop=True
    # stopped the third attempt, which would have worked
    read = flaky_fetch(failures)
    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=True)
    with contextlib.suppress(ConnectionError) if failures == 3 else contextlib.nullcontext():
        assert read.invoke("a", {"callbacks": [handler]}) == "text of a"
    [trace] = evaluator.captured()
    assert (trace.status, trace.alerts) == (
        RunStatus.OK if failures < 3 else RunStatus.ERROR,
        [],
    )
    gets = [s for s in trace.spans if s.name == "get"]
    assert [s.attributes.get(GRAPH_STEP) for s in gets] == [0, 0, 0]  # one task, run again
    assert_fetched_once(trace, failures)


def test_parallel_nodes_that_each_make_a_call_once_are_not_a_loop_and_steps_in_turn_are(
    evaluator: OnlineEvaluator,
) -> None:
    # three analysts on parallel edges, each reading the customer's profile once: no loop;
    # a node that reads it again on each of three rounds of the graph (a cycle of steps,
    # one task each) still is one
    @tool
    def customer_profile(customer_id: str) -> str:
        """A customer's profile."""
        return f"{customer_id}: gold tier"

    class Notes(TypedDict):
        rounds: int
        notes: Annotated[list[str], operator.add]

    def analyst(name: str) -> Any:
        def analyse(state: dict[str, Any]) -> dict[str, Any]:
            return {"notes": [f"{name}: {customer_profile.invoke({'customer_id': 'C-7'})}"]}

        return analyse

    team = StateGraph(Notes)
    for name in ("risk", "churn", "upsell"):
        team.add_node(name, analyst(name))
        team.add_edge(START, name)
        team.add_edge(name, END)

    def again(state: dict[str, Any]) -> dict[str, Any]:
        customer_profile.invoke({"customer_id": "C-7"})
        return {"rounds": state["rounds"] + 1}

    rounds = StateGraph(Notes)
    rounds.add_node("check", again)
    rounds.add_edge(START, "check")
    rounds.add_conditional_edges("check", lambda s: END if s["rounds"] == 3 else "check")

    handler = AgentEvalCallbackHandler(evaluator)
    state = team.compile().invoke({"rounds": 0, "notes": []}, {"callbacks": [handler]})
    assert sorted(state["notes"]) == [
        "churn: C-7: gold tier",
        "risk: C-7: gold tier",
        "upsell: C-7: gold tier",
    ]
    assert rounds.compile().invoke({"rounds": 0, "notes": []}, {"callbacks": [handler]}) == {
        "rounds": 3,
        "notes": [],
    }
    analysed, checked = evaluator.captured()
    # the three analysts are the tasks of the graph's first step
    assert sorted(
        (s.name, s.attributes[GRAPH_STEP]) for s in analysed.spans if GRAPH_STEP in s.attributes
    ) == [("churn", 1), ("risk", 1), ("upsell", 1)]
    assert (analysed.alerts, ToolCallLoops().measure(analysed).score) == ([], 1.0)
    assert [s.attributes[GRAPH_STEP] for s in checked.spans if s.name == "check"] == [1, 2, 3]
    [alert] = checked.alerts
    assert (alert.pattern, alert.count) == ("repeated_call", 3)
    assert ToolCallLoops().measure(checked).score == 0.0


def test_sub_agents_sent_at_once_that_each_make_a_call_once_are_not_a_loop(
    evaluator: OnlineEvaluator,
) -> None:
    # unnamed create_agent sub-agents sent at once by a plain node (no agent spans, so no
    # lanes of their own), each asking for the refund policy once: not a loop. A model that
    # asks for one call three times in one reply is read as in every framework (each call
    # runs as a task of one step of its own agent's graph): a repeated call
    @tool
    def refund_policy() -> str:
        """The refund policy."""
        return "30 days."

    def reply(messages: Any) -> AIMessage:
        if messages[-1].type == "tool":
            return AIMessage(f"{messages[0].content}: {messages[-1].content}")
        order = str(messages[0].content).split()[-1]
        return AIMessage("", tool_calls=[tool_call("refund_policy", f"p-{order}")])

    checker = create_agent(ScriptedChatModel(reply=reply), tools=[refund_policy])
    handler = AgentEvalCallbackHandler(evaluator)
    state = sent_at_once(checker, "Refund").invoke(
        {"items": ["A-1", "B-2", "C-3"], "results": []}, {"callbacks": [handler]}
    )
    assert sorted(state["results"]) == [f"Refund {o}: 30 days." for o in ("A-1", "B-2", "C-3")]
    thrice = AIMessage("", tool_calls=[tool_call("refund_policy", f"p{n}") for n in range(3)])
    create_agent(
        ScriptedChatModel(replies=[thrice, AIMessage("30 days.")]), tools=[refund_policy]
    ).invoke({"messages": [("user", "Refund policy?")]}, {"callbacks": [handler]})
    fanned, asked_thrice = evaluator.captured()
    assert sorted((c.id, c.result) for c in fanned.tool_calls()) == [
        ("p-A-1", "30 days."),
        ("p-B-2", "30 days."),
        ("p-C-3", "30 days."),
    ]
    assert (fanned.alerts, ToolCallLoops().measure(fanned).score) == ([], 1.0)
    [alert] = asked_thrice.alerts
    assert sorted(c.id for c in alert.calls) == ["p0", "p1", "p2"]  # run in any order
    assert ToolCallLoops().measure(asked_thrice).score == 0.0


@pytest.mark.parametrize("owned_up", [False, True])
def test_a_failure_in_one_task_of_a_step_is_not_recovered_by_the_tasks_beside_it(
    evaluator: OnlineEvaluator, owned_up: bool
) -> None:
    # three unnamed sub-agents sent at once, each looking up one order; Z-9's lookup
    # failed and its agent answered as if it had shipped. The lookups of A-1 and B-2 came
    # later, with other arguments, and counted as its recovery (0.83), though neither
    # agent could see it: a graph's tasks see each other's results once their step ends
    @tool
    def order_status(order_id: str) -> str:
        """Status of an order."""
        return "Error: no order Z-9" if order_id == "Z-9" else "shipped"

    def reply(messages: Any) -> AIMessage:
        order = str(messages[0].content).split()[-1]
        if messages[-1].type != "tool":
            return AIMessage(
                "", tool_calls=[tool_call("order_status", f"c-{order}", order_id=order)]
            )
        if owned_up and order == "Z-9":
            return AIMessage("I could not find order Z-9.")
        return AIMessage(f"{order} has shipped.")

    checker = create_agent(ScriptedChatModel(reply=reply), tools=[order_status])
    sent_at_once(checker, "Check").invoke(
        {"items": ["Z-9", "A-1", "B-2"], "results": []},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    assert sorted((c.arguments["order_id"], c.failed) for c in trace.tool_calls()) == [
        ("A-1", False),
        ("B-2", False),
        ("Z-9", True),
    ]
    failures = ToolFailures().measure(trace)
    # 1 − (1 failed + 1 not recovered) / (2 × 3) = 2/3; owned up to: 1 − 1 / 6 = 5/6
    assert failures.score == pytest.approx(5 / 6 if owned_up else 2 / 3)
    assert [(f["arguments"], f["recovered"]) for f in failures.metadata["failures"]] == [
        ({"order_id": "Z-9"}, owned_up)
    ]


@pytest.mark.parametrize("failures", [2, 3])
def test_a_node_its_retry_policy_ran_again_made_each_call_once(
    evaluator: OnlineEvaluator, failures: int
) -> None:
    # summarisers sent at once, each fetching its document itself (no call id); B's fetch
    # timed out and LangGraph's RetryPolicy ran its node again, up to three times. Each run
    # was a call of its own: B's two timeouts before the fetch that worked were two failed
    # calls (tool_failures 0.8 for a run that worked), where a retry middleware's runs of a
    # call count as its last
    from langgraph.types import RetryPolicy

    fetched: list[str] = []

    @tool
    def fetch(doc: str) -> str:
        """A document's text."""
        fetched.append(doc)
        if doc == "b" and fetched.count("b") <= failures:
            raise ConnectionError("timed out")
        return f"text of {doc}"

    class Documents(TypedDict):
        docs: list[str]
        texts: Annotated[list[str], operator.add]

    graph = StateGraph(Documents)
    graph.add_node(
        "summarise",
        lambda state: {"texts": [fetch.invoke({"doc": state["doc"]})]},
        retry_policy=RetryPolicy(
            max_attempts=3, initial_interval=0.01, jitter=False, retry_on=ConnectionError
        ),
    )
    graph.add_conditional_edges(
        START, lambda state: [Send("summarise", {"doc": d}) for d in state["docs"]], ["summarise"]
    )
    graph.add_edge("summarise", END)
    with contextlib.suppress(ConnectionError):  # three timeouts: the graph raises
        graph.compile().invoke(
            {"docs": ["a", "b", "c"], "texts": []},
            {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
        )
    [trace] = evaluator.captured()
    assert sorted(fetched) == ["a", "b", "b", "b", "c"]
    b = ("b", "text of b", None) if failures == 2 else ("b", None, "ConnectionError: timed out")
    assert sorted((c.arguments["doc"], c.result, c.error) for c in trace.tool_calls()) == [
        ("a", "text of a", None),
        b,
        ("c", "text of c", None),
    ]
    assert len(trace.tool_calls(every_run=True)) == 5
    failed = ToolFailures().measure(trace)
    # worked: no call failed; three timeouts: 1 − (1 failed + 1 not recovered) / (2 × 3)
    assert (failed.score, failed.metadata["runs_retried"]) == (
        1.0 if failures == 2 else pytest.approx(2 / 3),
        2,
    )
    assert (trace.alerts, ToolCallLoops().measure(trace).score) == ([], 1.0)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_models_reasoning_is_recorded_and_is_the_thought_of_its_calls(
    evaluator: OnlineEvaluator, streamed: bool
) -> None:
    # Anthropic's thinking blocks, OpenAI's reasoning summary and a reasoning model's
    # reasoning_content: read through LangChain's standard content blocks. The reasoning
    # was dropped, and a judge read "Let me check." as the agent's whole thought
    anthropic = {"model_provider": "anthropic"}
    thinking = {"type": "thinking", "thinking": "The user needs A-1's status.", "signature": "s"}
    asks = AIMessage(
        content=[thinking, {"type": "text", "text": "Let me check."}],
        tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")],
        response_metadata=anthropic,
    )
    summary = {"type": "summary_text", "text": "Check the other order too."}
    asks_again = AIMessage(
        content=[{"type": "reasoning", "id": "rs_1", "summary": [summary]}],
        tool_calls=[tool_call("lookup_order", "c2", order_id="A-2")],
        response_metadata={"model_provider": "openai"},
    )
    answers = AIMessage(
        "Both have shipped.", additional_kwargs={"reasoning_content": "Both say shipped."}
    )
    agent = create_agent(
        ScriptedChatModel(replies=[asks, asks_again, answers]), tools=[lookup_order]
    )
    request = {"messages": [("user", "Where are A-1 and A-2?")]}
    config: Any = {"callbacks": [AgentEvalCallbackHandler(evaluator)]}
    if streamed:
        for _ in agent.stream(request, config, stream_mode="messages"):
            pass
    else:
        agent.invoke(request, config)
    [trace] = evaluator.captured()
    calls = trace.spans_of(SpanKind.LLM)
    assert [(s.output, s.attributes.get(REASONING), s.thought) for s in calls] == [
        (
            "Let me check.",
            "The user needs A-1's status.",
            "The user needs A-1's status.\n\nLet me check.",
        ),
        ("", "Check the other order too.", "Check the other order too."),
        ("Both have shipped.", "Both say shipped.", None),
    ]
    assert trace.output == "Both have shipped."
    assert describe_trace(EvalCase.of(trace)) == "\n".join(
        [
            "user input: Where are A-1 and A-2?",
            "step 1 thought: The user needs A-1's status.\n\nLet me check.",
            'step 1 tool call: lookup_order({"order_id": "A-1"}) -> result: shipped',
            "step 1 output: Let me check.",
            "step 2 thought: Check the other order too.",
            'step 2 tool call: lookup_order({"order_id": "A-2"}) -> result: shipped',
            "step 3 output: Both have shipped.",
            "final answer: Both have shipped.",
        ]
    )


@pytest.mark.parametrize("streamed", [False, True])
def test_tools_the_provider_ran_inside_a_model_call_are_its_tool_calls(
    evaluator: OnlineEvaluator, streamed: bool
) -> None:
    # a provider's built-in tools (Anthropic's web search, OpenAI's code interpreter) run
    # inside the model call: they were in no trace, so a run that searched the web three
    # times, once in vain, read as one lookup that worked
    anthropic, openai = {"model_provider": "anthropic"}, {"model_provider": "openai"}
    found = [{"type": "web_search_result", "title": "No delays", "url": "https://c.example"}]
    searched = AIMessage(
        content=[
            {"type": "text", "text": "Searching. "},
            {
                "type": "server_tool_use",
                "id": "s1",
                "name": "web_search",
                "input": {"query": "delays"},
            },
            {"type": "web_search_tool_result", "tool_use_id": "s1", "content": found},
            {
                "type": "server_tool_use",
                "id": "s2",
                "name": "web_search",
                "input": {"query": "A-1"},
            },
            {
                "type": "web_search_tool_result",
                "tool_use_id": "s2",
                "content": {
                    "type": "web_search_tool_result_error",
                    "error_code": "max_uses_exceeded",
                },
            },
            {"type": "text", "text": "No delays; checking the order."},
            {"type": "tool_use", "id": "c1", "name": "lookup_order", "input": {"order_id": "A-1"}},
        ],
        tool_calls=[tool_call("lookup_order", "c1", order_id="A-1")],
        response_metadata=anthropic,
    )
    computed = AIMessage(
        content=[
            {
                "type": "code_interpreter_call",
                "id": "ci_1",
                "status": "completed",
                "code": "print(3 + 4)",
                "outputs": [{"type": "logs", "logs": "7"}],
            },
            {"type": "text", "text": "A-1 has shipped, in 7 days.", "annotations": []},
        ],
        response_metadata=openai,
    )
    agent = create_agent(
        ScriptedChatModel(replies=[searched, computed]),
        tools=[lookup_order, {"type": "web_search_20250305", "name": "web_search"}],
    )
    request = {"messages": [("user", "Where is A-1?")]}
    config: Any = {"callbacks": [AgentEvalCallbackHandler(evaluator)]}
    if streamed:
        for _ in agent.stream(request, config, stream_mode="messages"):
            pass
    else:
        agent.invoke(request, config)
    [trace] = evaluator.captured()
    first, second = trace.spans_of(SpanKind.LLM)
    error = '{"error_code": "max_uses_exceeded", "type": "web_search_tool_result_error"}'
    ran_by_provider = [
        ToolCall(id="s1", name="web_search", arguments={"query": "delays"}, result=found),
        ToolCall(id="s2", name="web_search", arguments={"query": "A-1"}, error=error),
    ]
    assert [(c.id, c.name, c.arguments) for c in first.requested_tool_calls] == [
        ("s1", "web_search", {"query": "delays"}),
        ("s2", "web_search", {"query": "A-1"}),
        ("c1", "lookup_order", {"order_id": "A-1"}),
    ]
    tools = [s for s in trace.spans if s.kind is SpanKind.TOOL]
    under = {first.id: "first call", second.id: "second call"} | {
        s.id: s.name for s in trace.spans if s.kind is SpanKind.CHAIN
    }
    assert [(under[s.parent_id], s.tool_call, s.attributes.get(PROVIDER_TOOL)) for s in tools] == [
        ("first call", ran_by_provider[0], True),
        ("first call", ran_by_provider[1], True),
        (
            "tools",
            ToolCall(id="c1", name="lookup_order", arguments={"order_id": "A-1"}, result="shipped"),
            None,
        ),
        (
            "second call",
            ToolCall(
                id="ci_1",
                name="code_interpreter",
                arguments={"code": "print(3 + 4)"},
                result=[{"type": "logs", "logs": "7"}],
            ),
            True,
        ),
    ]
    assert [[c.id for c in step.tool_calls] for step in trace.steps()] == [
        ["s1", "s2", "c1"],
        ["ci_1"],
    ]
    # the failed search was followed by another call: recovered, risk 0.5 of 4 calls
    checked = ToolFailures().measure(trace)
    assert (checked.score, checked.reason) == (
        1 - 0.5 / 4,
        "1 of 4 tool calls failed (web_search), 0 not recovered",
    )


def responses_api_reply(output: list[dict[str, Any]]) -> Reply:
    """An OpenAI Responses API response holding ``output``, as the loopback server sends it."""
    usage = {
        "input_tokens": 20,
        "output_tokens": 9,
        "total_tokens": 29,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 4},
    }
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "gpt-5",
        "status": "completed",
        "output": output,
        "usage": usage,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    return Reply(body=json.dumps(response))


def test_a_real_chat_openai_on_the_responses_api_gives_its_reasoning_and_web_search(
    evaluator: OnlineEvaluator, judge_server: JudgeServer
) -> None:
    # langchain-openai reading a Responses API reply (from a loopback server): a reasoning
    # summary, a web search OpenAI ran, a function call; then the answer
    summary = {"type": "summary_text", "text": "Search carrier news, then look A-1 up."}
    judge_server.reply(
        responses_api_reply(
            [
                {"type": "reasoning", "id": "rs_1", "summary": [summary]},
                {
                    "type": "web_search_call",
                    "id": "ws_1",
                    "status": "completed",
                    "action": {"type": "search", "query": "carrier delays"},
                },
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "lookup_order",
                    "arguments": '{"order_id": "A-1"}',
                    "status": "completed",
                },
            ]
        ),
        responses_api_reply(
            [
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": "A-1 has shipped.", "annotations": []}
                    ],
                }
            ]
        ),
    )
    model = ChatOpenAI(
        model="gpt-5", base_url=judge_server.base_url, api_key="sk-test", use_responses_api=True
    )
    agent = create_agent(model, tools=[lookup_order, {"type": "web_search"}])
    agent.invoke(
        {"messages": [("user", "Where is A-1?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    [trace] = evaluator.captured()
    assert judge_server.paths == ["/v1/responses", "/v1/responses"]
    first, second = trace.spans_of(SpanKind.LLM)
    assert (first.attributes[REASONING], first.thought) == (summary["text"], summary["text"])
    assert first.attributes["gen_ai.usage.reasoning.output_tokens"] == 4
    assert [(s.tool_call, s.attributes.get(PROVIDER_TOOL)) for s in trace.spans if s.tool_call] == [
        (
            ToolCall(
                id="ws_1",
                name="web_search",
                arguments={"type": "search", "query": "carrier delays"},
            ),
            True,
        ),
        (
            ToolCall(
                id="call_1", name="lookup_order", arguments={"order_id": "A-1"}, result="shipped"
            ),
            None,
        ),
    ]
    assert (second.output, trace.output) == ("A-1 has shipped.", "A-1 has shipped.")


def test_a_tool_call_whose_arguments_could_not_be_read_failed(
    evaluator: OnlineEvaluator, judge_server: JudgeServer
) -> None:
    # a model (through a real ChatOpenAI, from a loopback server) cut its call's JSON short:
    # langchain-openai keeps it in invalid_tool_calls, no tool runs it, and the agent ends
    # with an empty answer. Nothing of it was in the trace, and every default metric passed
    cut_short = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1'},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59},
    }
    judge_server.reply(Reply(body=json.dumps(cut_short)))
    model = ChatOpenAI(model="gpt-4o-mini", base_url=judge_server.base_url, api_key="sk-test")
    answer = create_agent(model, tools=[lookup_order]).invoke(
        {"messages": [("user", "Where is A-1?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    assert answer["messages"][-1].invalid_tool_calls[0]["args"] == '{"order_id": "A-1'
    [trace] = evaluator.captured()
    assert (trace.status, trace.output) == (RunStatus.OK, "")
    [call] = trace.tool_calls()
    assert call.id == "call_1" and (call.name, call.arguments, call.result) == (
        "lookup_order",
        {},
        None,
    )
    assert call.error is not None and call.error.startswith(
        "the model's arguments could not be read ("
    )
    assert call.error.endswith('): {"order_id": "A-1')
    [model_call] = trace.spans_of(SpanKind.LLM)
    [unread] = [span for span in trace.spans if span.tool_call is not None]
    assert unread.parent_id == model_call.id and unread.kind is SpanKind.TOOL
    failures = ToolFailures().measure(trace)
    assert (failures.score, failures.reason) == (
        0.0,
        "1 of 1 tool calls failed (lookup_order), 1 not recovered",
    )


@tool
def read_page(page: int) -> str:
    """Read a page of the manual."""
    return f"page {page}: " + "the pump primes in three strokes. " * 40


def _reading_agent(middleware: list[Any]) -> tuple[Any, list[list[tuple[str, Any]]]]:
    """An agent that reads five pages, one per model call, and what each call was sent."""
    received: list[list[tuple[str, Any]]] = []

    def reply(messages: Any) -> AIMessage:
        received.append([(m.type, m.content) for m in messages])
        turn = len(received)
        if turn <= 5:
            return AIMessage("", tool_calls=[tool_call("read_page", f"p{turn}", page=turn)])
        return AIMessage("The pump primes in three strokes.")

    model = ScriptedChatModel(reply=reply)
    return create_agent(model, tools=[read_page], middleware=middleware), received


def _summarise_first_page(evaluator: OnlineEvaluator) -> Any:
    from langchain.agents.middleware import wrap_model_call

    def summarise(request: Any, handler: Any) -> Any:
        # the app's own code shortens an early tool result in place (the same message
        # object) once the conversation grows: the calls after it were sent the short text.
        # The recorder reads a call's messages after the call started, on its own thread:
        # it has caught up here, so the calls before the change are recorded as sent
        tools = [m for m in request.messages if isinstance(m, ToolMessage)]
        if len(tools) == 3:
            evaluator.flush()
            tools[0].content = "page 1: summarised"
        return handler(request)

    return wrap_model_call(summarise)


@pytest.mark.parametrize("editing", ["in place", "context editing"])
def test_each_model_call_records_what_it_was_sent_and_the_line_each_message_once(
    evaluator: OnlineEvaluator, editing: str
) -> None:
    # every model call is sent the conversation so far: held as it came, a run of 300 tool
    # calls kept 45,000 copies of their results (400 MB) and wrote a 119 MB line. Messages
    # resent are now held and written once, and a message changed since it was first sent
    # (in place, or by ContextEditingMiddleware's copies) is recorded as the call got it
    from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware

    middleware: Any = (
        _summarise_first_page(evaluator)
        if editing == "in place"
        else ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=800, keep=2)])
    )
    agent, received = _reading_agent([middleware])
    agent.invoke(
        {"messages": [("user", "How does the pump prime?")]},
        {"callbacks": [AgentEvalCallbackHandler(evaluator)]},
    )
    evaluator.flush()
    [trace] = evaluator.captured()
    calls = trace.spans_of(SpanKind.LLM)
    recorded = [[(m["role"], m["content"]) for m in call.input[0]] for call in calls]
    assert recorded == received and len(received) == 6
    changed = "page 1: summarised" if editing == "in place" else "[cleared]"
    assert [m[2][1] for m in received[1:]] == [
        read_page.invoke({"page": 1}),
        read_page.invoke({"page": 1}),
        changed,
        changed,
        changed,
    ]
    # held once: a later call's messages are the earlier call's own objects
    assert calls[5].input[0][0] is calls[1].input[0][0]
    # written once: each page's text is in one model call's input of the line
    [line] = (evaluator.capture_path or Path()).read_text().splitlines()
    written = [s["input"] for s in json.loads(line)["spans"] if s["kind"] == "llm"]
    counts = [
        json.dumps(written).count(json.dumps(read_page.invoke({"page": page})))
        for page in range(1, 6)
    ]
    # a call that was sent a changed message shares only the messages before it: the
    # pages after the change are written again (once per change)
    assert counts == ([1, 2, 1, 1, 1] if editing == "in place" else [1, 2, 2, 2, 1])
    assert json.loads(line) == json.loads(trace.to_json())


def test_an_exit_with_a_run_in_flight_captures_it(tmp_path: Path) -> None:
    # the process exits (no close: the exit hook closes the evaluator) while an agent
    # thread waits on its model, which never answers: the run is on disk as it stood
    script = f"""
import threading
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from agenteval_core import OnlineEvaluator
from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel, tool_call

asked = threading.Event()

@tool
def lookup(order_id: str) -> str:
    \"\"\"Look up an order.\"\"\"
    return "A-1 is held for approval"

def reply(messages):
    if len(messages) == 1:
        return AIMessage("", tool_calls=[tool_call("lookup", "c1", order_id="A-1")])
    asked.set()
    threading.Event().wait()  # the model never answers

agent = create_agent(ScriptedChatModel(reply=reply), tools=[lookup])
evaluator = OnlineEvaluator(capture={str(tmp_path / "c.jsonl")!r}, log=False)
handler = AgentEvalCallbackHandler(evaluator)
request = {{"messages": [("user", "Where is A-1?")]}}
threading.Thread(
    target=lambda: agent.invoke(request, {{"callbacks": [handler]}}), daemon=True
).start()
assert asked.wait(30)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    [trace] = read_capture(tmp_path / "c.jsonl")
    reason = "still running when the evaluator closed: recorded as it stood"
    assert (trace.status, trace.status_reason, trace.input) == (
        RunStatus.UNFINISHED,
        reason,
        "Where is A-1?",
    )
    assert [(c.name, c.arguments, c.result) for c in trace.tool_calls()] == [
        ("lookup", {"order_id": "A-1"}, "A-1 is held for approval")
    ]
    assert [(s.name, s.error) for s in trace.spans_of(SpanKind.LLM)] == [
        ("scripted-model", None),
        ("scripted-model", reason),
    ]
    assert "1 run(s) were still going when the evaluator closed" in done.stderr
