"""LlamaIndex runs an evaluator must get right: one instrumentation per process with a
session per run, a run its caller cancelled, an LLM call that failed, tool calls a custom
workflow step makes, and a loop guard that cannot stop a run."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agenteval_llamaindex import instrument
from capture_helpers import regression_case
from llama_index.core.agent.workflow import (
    AgentWorkflow,
    CodeActAgent,
    FunctionAgent,
    ReActAgent,
)
from llama_index.core.base.llms.types import (
    ChatResponse,
    ChatResponseAsyncGen,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.instrumentation.dispatcher import instrument_tags
from llama_index.core.llms import AudioBlock, ChatMessage, ImageBlock, MessageRole, TextBlock
from llama_index.core.llms.callbacks import llm_chat_callback
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import (
    InputRequiredEvent,
    StartEvent,
    StopEvent,
    Workflow,
    step,
)
from llamaindex_hitl import (
    ApproveRefund,
    answered_at_once,
    refund_agent,
    resume,
    saved_when_it_asks,
)
from llamaindex_models import CompletionModel, orders_index
from pydantic import BaseModel
from workflows.errors import WorkflowCancelledByUser
from workflows.retry_policy import retry_policy, stop_after_attempt, wait_none

from agenteval_core import (
    AGENT_NAME,
    REASONING,
    TOOL_NOT_RUN,
    EvalCase,
    OnlineEvaluator,
    RunStatus,
    SpanKind,
    ToolCallLimit,
    Trace,
)
from agenteval_core.metrics import Coherence, ToolCallLoops, ToolFailures
from agenteval_core.metrics._judge_base import describe_trace


def lookup_order(order_id: str) -> str:
    """Status of an order."""
    return "shipped"


def answer(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text)


def calls_then_answer(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
    if any(m.role == MessageRole.TOOL for m in messages):
        return answer("A-1 has shipped.")
    block = ToolCallBlock(
        tool_call_id="c1", tool_name="lookup_order", tool_kwargs={"order_id": "A-1"}
    )
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])


def agent_run(
    evaluator: OnlineEvaluator, agent: Any, question: str | ChatMessage
) -> tuple[str, Trace]:
    """``agent``'s answer to ``question``, and the trace the handler captured of the run."""

    async def run() -> str:
        return str(await agent.run(question))

    instrumentation = instrument(evaluator)
    try:
        answer = asyncio.run(run())
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    return answer, trace


def test_one_instrumentation_and_a_session_per_run(evaluator: OnlineEvaluator) -> None:
    first = instrument(evaluator, session_id="everyone")
    second = instrument(evaluator)  # replaces the first: no run is recorded twice
    try:
        assert not first.installed and second.installed
        agent = FunctionAgent(
            tools=[FunctionTool.from_defaults(lookup_order)],
            llm=MockFunctionCallingLLM(response_generator=calls_then_answer),
        )

        async def main() -> None:
            for user in ("user-1", "user-2"):
                with instrument_tags({"session_id": user}):
                    await agent.run(f"Where is A-1? ({user})")

        asyncio.run(main())
        traces = evaluator.captured()
    finally:
        second.uninstrument()
    assert [(t.session_id, t.input) for t in traces] == [
        ("user-1", "Where is A-1? (user-1)"),
        ("user-2", "Where is A-1? (user-2)"),
    ]
    assert [[c.arguments for c in t.tool_calls()] for t in traces] == [[{"order_id": "A-1"}]] * 2


def approval_agent(started: asyncio.Event) -> FunctionAgent:
    """An agent that calls ``wait_for_approval``, which sets ``started`` and never returns."""

    async def wait_for_approval(order_id: str) -> str:
        """Wait for a human to approve."""
        started.set()
        await asyncio.Event().wait()
        return "approved"

    def ask(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        block = ToolCallBlock(
            tool_call_id="w1", tool_name="wait_for_approval", tool_kwargs={"order_id": "A-1"}
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    return FunctionAgent(
        tools=[FunctionTool.from_defaults(async_fn=wait_for_approval)],
        llm=MockFunctionCallingLLM(response_generator=ask),
    )


def test_a_run_its_caller_cancelled_says_so(evaluator: OnlineEvaluator) -> None:
    started = asyncio.Event()

    agent = approval_agent(started)
    instrumentation = instrument(evaluator)
    try:

        async def main() -> None:
            handler = agent.run("Refund A-1 once approved")
            await started.wait()
            await handler.cancel_run()
            with pytest.raises(BaseException) as cancelled:
                await handler
            assert type(cancelled.value).__name__ == "WorkflowCancelledByUser"

        asyncio.run(main())
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    assert trace.status is RunStatus.CANCELLED
    assert trace.status_reason == "cancelled by its caller"
    assert trace.error is None  # the workflow ended it, as asked: nothing raised


def test_a_run_whose_task_is_cancelled_says_so(evaluator: OnlineEvaluator) -> None:
    # what a timeout around the run (asyncio.wait_for) or a client gone does to it
    started = asyncio.Event()

    agent = approval_agent(started)
    instrumentation = instrument(evaluator)
    try:

        async def main() -> None:
            run = asyncio.ensure_future(agent.run("Refund A-1 once approved"))
            await started.wait()
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run

        asyncio.run(main())
        assert evaluator.flush(10)
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    assert (trace.status, trace.status_reason, trace.error) == (
        RunStatus.CANCELLED,
        "cancelled by its caller",
        "CancelledError",  # the exception's name alone: it has no message
    )
    [call] = trace.tool_calls()
    assert (call.id, call.name, call.arguments, call.result, call.error) == (
        "w1",
        "wait_for_approval",
        {"order_id": "A-1"},
        None,
        "not ended before its run ended",  # its one record says it never returned
    )


def test_a_failed_llm_call_carries_the_providers_error(evaluator: OnlineEvaluator) -> None:
    def down(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        raise ConnectionError("provider returned 503: overloaded")

    agent = FunctionAgent(tools=[], llm=MockFunctionCallingLLM(response_generator=down))
    instrumentation = instrument(evaluator)
    try:

        async def main() -> None:
            await agent.run("Where is A-1?")

        with pytest.raises(Exception, match="overloaded"):
            asyncio.run(main())
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    [llm] = trace.spans_of(SpanKind.LLM)
    assert llm.error == "ConnectionError: provider returned 503: overloaded"
    assert trace.status is RunStatus.ERROR


def test_a_react_agent_asks_for_its_calls_in_text(evaluator: OnlineEvaluator) -> None:
    def react(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role != MessageRole.SYSTEM and "Observation" in str(m.content) for m in messages):
            return answer("Thought: I can answer.\nAnswer: A-1 has shipped.")
        return answer(
            'Thought: I need the status.\nAction: lookup_order\nAction Input: {"order_id": "A-1"}'
        )

    agent = ReActAgent(
        tools=[FunctionTool.from_defaults(lookup_order)],
        llm=MockFunctionCallingLLM(response_generator=react),
    )
    instrumentation = instrument(evaluator)
    try:

        async def main() -> None:
            await agent.run("Where is A-1?")

        asyncio.run(main())
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    first = trace.spans_of(SpanKind.LLM)[0]
    assert first.thought == "I need the status."
    assert [(c.name, c.arguments) for c in first.requested_tool_calls] == [
        ("lookup_order", {"order_id": "A-1"})
    ]
    [executed] = trace.tool_calls()
    assert (executed.name, executed.arguments, executed.result) == (
        "lookup_order",
        {"order_id": "A-1"},
        "shipped",
    )
    assert [tool.name for tool in trace.tools] == ["lookup_order"]


def test_a_call_of_a_tool_the_agent_does_not_have_ran_no_tool(
    evaluator: OnlineEvaluator,
) -> None:
    # LlamaIndex answers a call of a tool the agent does not have itself: no tool runs.
    # Recorded as any failed call, it made a regression case that required track_parcel to
    # be called and to succeed, which no fix of the agent can do
    def asked(call_id: str, name: str) -> ChatMessage:
        block = ToolCallBlock(tool_call_id=call_id, tool_name=name, tool_kwargs={"order_id": "A-1"})
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    replies = [
        asked("c0", "track_parcel"),
        asked("c1", "track_parcel"),
        asked("c2", "lookup_order"),
    ]

    def reply(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        done = sum(1 for m in messages if m.role == MessageRole.TOOL)
        return replies[done] if done < len(replies) else answer("A-1 has shipped.")

    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(lookup_order)],
        llm=MockFunctionCallingLLM(response_generator=reply),
    )
    said, trace = agent_run(evaluator, agent, "Where is A-1?")
    assert said == "A-1 has shipped."
    unknown = "Tool track_parcel not found. Please select a tool that is available."
    assert [
        (c.id, c.name, c.arguments, c.result, c.error, s.attributes.get(TOOL_NOT_RUN))
        for s in trace.spans_of(SpanKind.TOOL)
        for c in [s.tool_call]
        if c is not None
    ] == [
        ("c0", "track_parcel", {"order_id": "A-1"}, unknown, unknown, True),
        ("c1", "track_parcel", {"order_id": "A-1"}, unknown, unknown, True),
        ("c2", "lookup_order", {"order_id": "A-1"}, "shipped", None, None),
    ]
    # the failed calls are the agent's (1 - 2 / (2 × 3) < 0.7: a case), no tool's to fix
    case = regression_case(evaluator)
    assert [(m.name, m.score) for m in case.provenance.failing_metrics] == [
        ("tool_failures", pytest.approx(2 / 3))
    ]
    assert (case.metrics, case.tools_must_succeed, case.provenance.failed_tools) == (
        ["tool_failures"],
        None,
        [],
    )


def triage_and_billing(triage: Any, billing: Any) -> AgentWorkflow:
    """An AgentWorkflow of a "triage" agent (no tools; it may hand off to "billing") and a
    "billing" agent (lookup_order), their models replying with ``triage`` and ``billing``."""
    return AgentWorkflow(
        agents=[
            FunctionAgent(
                name="triage",
                description="routes requests",
                tools=[],
                llm=MockFunctionCallingLLM(response_generator=triage),
                can_handoff_to=["billing"],
            ),
            FunctionAgent(
                name="billing",
                description="handles refunds",
                tools=[FunctionTool.from_defaults(lookup_order)],
                llm=MockFunctionCallingLLM(response_generator=billing),
            ),
        ],
        root_agent="triage",
    )


@pytest.mark.parametrize("works", [False, True], ids=["ping-pong", "new-order-each-time"])
def test_agents_handing_a_request_back_and_forth_are_a_loop_whatever_their_reasons(
    evaluator: OnlineEvaluator, works: bool
) -> None:
    # triage hands the request to billing, which hands it back, each time with a reason in
    # its own words: each handoff was a call new to the run (its reason in its arguments,
    # and in what it returned), so the ping-pong was never a loop, live or scored. With
    # billing looking up a new order each time, the handoffs between are its work
    reasons = iter(f"reason {n}" for n in range(100))
    looked = iter(f"A-{n}" for n in range(100))

    def hand_to(agent: str) -> Any:
        def reply(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
            said = [m for m in messages if m.role == MessageRole.TOOL]
            if works and agent == "triage" and said and said[-1].content.startswith("Agent b"):
                order = next(looked)  # billing's turn: a lookup first, then the handoff
                block = ToolCallBlock(
                    tool_call_id=f"l-{order}",
                    tool_name="lookup_order",
                    tool_kwargs={"order_id": order},
                )
                return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])
            handoff = {"to_agent": agent, "reason": next(reasons)}
            block = ToolCallBlock(
                tool_call_id=handoff["reason"], tool_name="handoff", tool_kwargs=handoff
            )
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

        return reply

    rounds = iter(range(4))

    def billing(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if works and next(rounds, None) is None:
            return answer("Refunded.")
        return hand_to("triage")(messages)

    workflow = triage_and_billing(hand_to("billing"), billing)
    workflow.agents["triage"].can_handoff_to = ["billing"]
    workflow.agents["billing"].can_handoff_to = ["triage"]
    instrumentation = instrument(evaluator, stop_on_loop=True)
    try:

        async def main() -> None:
            with contextlib.suppress(Exception):  # a stopped run raises
                await instrumentation.guard(workflow.run("Refund A-1"))

        asyncio.run(main())
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    made = [(c.name, dict(c.arguments), c.error) for c in trace.tool_calls()]

    def handoff(to: str, n: int, error: str | None = None) -> tuple[str, dict[str, Any], Any]:
        return "handoff", {"to_agent": to, "reason": f"reason {n}"}, error

    if works:
        lookups = [("lookup_order", {"order_id": f"A-{n}"}, None) for n in (0, 1)]
        assert made == [
            handoff("billing", 0),
            lookups[0],
            handoff("triage", 1),
            handoff("billing", 2),
            lookups[1],
            handoff("triage", 3),
            handoff("billing", 4),
        ]
        assert (trace.status, trace.alerts, trace.output) == (RunStatus.OK, [], "Refunded.")
        assert ToolCallLoops().measure(trace).score == 1.0
        return
    message = "cycle handoff → handoff repeated 2 times"
    refused = f"refused by the loop guard: {message}"
    assert made == [
        handoff("billing", 0),
        handoff("triage", 1),
        handoff("billing", 2),
        handoff("triage", 3, refused),
    ]
    assert (trace.status, trace.status_reason) == (
        RunStatus.STOPPED,
        f"stopped by the loop guard: {message}",
    )
    [alert] = trace.alerts
    assert [c.arguments["to_agent"] for c in alert.calls] == ["billing", "triage"] * 2
    loops = ToolCallLoops().measure(trace)
    assert (loops.score, loops.reason) == (0.0, message)
    # its regression case holds the handoff back to triage to once, whatever the reason
    case = regression_case(evaluator)
    assert case.tool_call_limits == [
        ToolCallLimit(name="handoff", arguments={"to_agent": "triage"}, max_calls=1)
    ]


def test_an_agent_workflow_says_which_agent_did_what(evaluator: OnlineEvaluator) -> None:
    def triage(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role == MessageRole.TOOL for m in messages):
            return answer("Handed off to billing.")
        handoff = {"to_agent": "billing", "reason": "a refund"}
        block = ToolCallBlock(tool_call_id="h1", tool_name="handoff", tool_kwargs=handoff)
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    def billing(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role == MessageRole.TOOL and "shipped" in str(m.content) for m in messages):
            return answer("Refunded A-1.")
        block = ToolCallBlock(
            tool_call_id="l1", tool_name="lookup_order", tool_kwargs={"order_id": "A-1"}
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    workflow = triage_and_billing(triage, billing)
    instrumentation = instrument(evaluator)
    try:

        async def main() -> None:
            assert str(await workflow.run("Refund A-1")) == "Refunded A-1."

        asyncio.run(main())
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    calls = [
        (span.name, span.attributes.get("gen_ai.agent.name"))
        for span in trace.spans_of(SpanKind.TOOL)
    ]
    assert calls == [("handoff", "triage"), ("lookup_order", "billing")]
    llm_agents = [span.attributes.get("gen_ai.agent.name") for span in trace.spans_of(SpanKind.LLM)]
    assert llm_agents[0] == "triage" and llm_agents[-1] == "billing"
    assert trace.output == "Refunded A-1."
    # each agent's steps nest under a span of its own, one after the other, under the run
    by_id = {span.id: span for span in trace.spans}
    root = trace.spans[0]
    agents = [s for s in trace.spans if s.kind is SpanKind.AGENT and s.parent_id == root.id]
    assert [(a.name, a.attributes.get("gen_ai.agent.name")) for a in agents] == [
        ("triage", "triage"),
        ("billing", "billing"),
    ]
    assert agents[0].end_time is not None and agents[0].end_time <= agents[1].start_time

    def agent_above(span_id: str | None) -> str | None:
        while span_id is not None and by_id[span_id].kind is not SpanKind.AGENT:
            span_id = by_id[span_id].parent_id
        return by_id[span_id].name if span_id is not None else None

    assert [(s.name, agent_above(s.parent_id)) for s in trace.spans_of(SpanKind.TOOL)] == [
        ("handoff", "triage"),
        ("lookup_order", "billing"),
    ]
    assert [agent_above(s.parent_id) for s in trace.spans_of(SpanKind.LLM)] == llm_agents


@pytest.mark.parametrize("streaming", [False, True])
def test_a_function_agent_streaming_or_not_gives_the_same_trace(
    streaming: bool, evaluator: OnlineEvaluator
) -> None:
    instrumentation = instrument(evaluator)
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(lookup_order)],
        llm=MockFunctionCallingLLM(response_generator=calls_then_answer),
        streaming=streaming,
    )

    async def run() -> str:
        return str(await agent.run("Where is A-1?"))

    try:
        assert asyncio.run(run()) == "A-1 has shipped."
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    assert (trace.status, trace.input, trace.output) == (
        RunStatus.OK,
        "Where is A-1?",
        "A-1 has shipped.",
    )
    requested = [
        c for s in trace.spans if s.kind is SpanKind.LLM for c in s.requested_tool_calls or []
    ]
    executed = [s.tool_call for s in trace.spans if s.tool_call is not None]
    assert [(c.id, c.name, c.arguments) for c in requested] == [
        ("c1", "lookup_order", {"order_id": "A-1"})
    ]
    assert [(c.id, c.name, c.arguments, c.result) for c in executed] == [
        ("c1", "lookup_order", {"order_id": "A-1"}, "shipped")
    ]


ORDERS = {"A-1": "shipped"}


def strict_lookup(order_id: str) -> str:
    """Status of an order; raises for an unknown one."""
    if order_id not in ORDERS:
        raise ValueError(f"no order {order_id}")
    return ORDERS[order_id]


class OrderFlow(Workflow):
    """A custom workflow whose step calls a tool itself, one call failing and handled."""

    lookup = FunctionTool.from_defaults(strict_lookup)

    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        found = await self.lookup.acall(order_id=ev.order)
        try:
            await self.lookup.acall(order_id="Z-9")
            other = "found"
        except ValueError as error:
            other = str(error)
        again = self.lookup.call(order_id=ev.order)
        return StopEvent(result=f"{found.content}; {other}; {again.content}")


class FailingFlow(Workflow):
    lookup = FunctionTool.from_defaults(strict_lookup)

    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        await self.lookup.acall(order_id=ev.order)
        return StopEvent(result="unreachable")


def test_a_handoff_the_workflow_refused_is_a_failed_call(evaluator: OnlineEvaluator) -> None:
    # a handoff to an agent the workflow does not have: LlamaIndex's handoff tool returns
    # its refusal as a plain result and the agent keeps control, so the call read as a
    # success and tool_failures passed it
    def triage(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role == MessageRole.TOOL for m in messages):
            return answer("I will handle the refund myself.")
        handoff = {"to_agent": "refunds", "reason": "a refund"}
        block = ToolCallBlock(tool_call_id="h1", tool_name="handoff", tool_kwargs=handoff)
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    workflow = triage_and_billing(triage, lambda messages, **_: answer("no"))
    instrumentation = instrument(evaluator)
    try:

        async def main() -> str:
            return str(await workflow.run("Refund A-1"))

        assert asyncio.run(main()) == "I will handle the refund myself."
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    refused = (
        "Agent refunds not found. Please select a valid agent to hand off to. Valid agents: billing"
    )
    assert [(c.id, c.name, c.arguments, c.result, c.error) for c in trace.tool_calls()] == [
        ("h1", "handoff", {"to_agent": "refunds", "reason": "a refund"}, refused, refused)
    ]
    assert {s.attributes.get("gen_ai.agent.name") for s in trace.spans_of(SpanKind.LLM)} == {
        "triage"
    }  # no other agent took over
    score = ToolFailures().measure(trace)
    assert (score.score, score.metadata["failed"]) == (0.0, 1)


def test_an_agent_a_tool_runs_is_an_agent_inside_the_tool(evaluator: OnlineEvaluator) -> None:
    # a FunctionAgent run from a tool (an agent called as a tool): its turns were taken for
    # a handoff of the outer run (an agent span under the root, and the outer agent's later
    # steps under a new one), and its steps, inside the tool, went missing from the run's
    def researching(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role == MessageRole.TOOL for m in messages):
            return answer("A-1 shipped on Monday.")
        block = ToolCallBlock(
            tool_call_id="r1", tool_name="lookup_order", tool_kwargs={"order_id": "A-1"}
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    researcher = FunctionAgent(
        name="researcher",
        tools=[FunctionTool.from_defaults(lookup_order)],
        llm=MockFunctionCallingLLM(response_generator=researching),
    )

    async def research(question: str) -> str:
        """Ask the research agent."""
        return str(await researcher.run(question))

    def asking(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role == MessageRole.TOOL for m in messages):
            return answer("It shipped on Monday.")
        block = ToolCallBlock(
            tool_call_id="c1", tool_name="research", tool_kwargs={"question": "Where is A-1?"}
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(async_fn=research)],
        llm=MockFunctionCallingLLM(response_generator=asking),
    )

    answered, trace = agent_run(evaluator, agent, "When did A-1 ship?")
    assert answered == "It shipped on Monday."
    root = trace.spans[0]
    turns = [s.name for s in trace.spans if s.parent_id == root.id and s.kind is SpanKind.AGENT]
    assert turns == ["Agent"]  # the outer agent's one turn: no handoff
    [tool_span] = [s for s in trace.spans_of(SpanKind.TOOL) if s.name == "research"]
    [inner] = [s for s in trace.spans if s.parent_id == tool_span.id]
    assert (inner.kind, inner.input, inner.output, inner.attributes.get("gen_ai.agent.name")) == (
        SpanKind.AGENT,
        "Where is A-1?",
        "A-1 shipped on Monday.",
        "researcher",
    )
    assert [(c.id, c.result) for c in trace.tool_calls()] == [
        ("c1", "A-1 shipped on Monday."),
        ("r1", "shipped"),
    ]
    assert [(step.output, [c.id for c in step.tool_calls]) for step in trace.steps()] == [
        (None, ["c1"]),
        (None, ["r1"]),  # the researcher's, inside the tool
        ("A-1 shipped on Monday.", []),
        ("It shipped on Monday.", []),
    ]


def coordinator_of_pollers(polls: dict[str, int]) -> FunctionAgent:
    """An agent that watches jobs A and B at once: one ``watch`` tool call each, in one
    message, each running a poller agent (``poller_a``, ``poller_b``) that checks its job
    ``polls[J]`` times; each check waits for the other poller's check of that round to
    start, so the checks interleave."""
    started: dict[str, asyncio.Event] = {}
    checks: dict[str, int] = dict.fromkeys(polls, 0)

    def check_started(check: str) -> asyncio.Event:
        return started.setdefault(check, asyncio.Event())

    async def job_status(job: str) -> str:
        """Status of a deploy job."""
        checks[job] += 1
        round_ = checks[job]
        check_started(f"{job}{round_}").set()
        other = "B" if job == "A" else "A"
        if round_ <= polls[other]:
            await asyncio.wait_for(check_started(f"{other}{round_}").wait(), 10)
        return "done" if round_ >= polls[job] else "running"

    def polling(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        job = str(next(m for m in messages if m.role == MessageRole.USER).content)[-1]
        done = sum(m.role == MessageRole.TOOL for m in messages)
        if done >= polls[job]:
            return answer(f"{job} is done")
        block = ToolCallBlock(
            tool_call_id=f"{job}{done + 1}", tool_name="job_status", tool_kwargs={"job": job}
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    async def watch(job: str) -> str:
        """Watch a deploy job until it is done."""
        poller = FunctionAgent(
            name=f"poller_{job.lower()}",
            tools=[FunctionTool.from_defaults(async_fn=job_status)],
            llm=MockFunctionCallingLLM(response_generator=polling),
        )
        return str(await poller.run(f"Watch {job}"))

    def coordinating(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role == MessageRole.TOOL for m in messages):
            return answer("Both are done.")
        blocks = [
            ToolCallBlock(tool_call_id=f"w{job}", tool_name="watch", tool_kwargs={"job": job})
            for job in polls
        ]
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)

    return FunctionAgent(
        tools=[FunctionTool.from_defaults(async_fn=watch)],
        llm=MockFunctionCallingLLM(response_generator=coordinating),
    )


@pytest.mark.parametrize("stop_on_loop", [True, False])
def test_agents_a_tool_runs_at_once_are_not_a_loop_and_one_that_loops_is(
    evaluator: OnlineEvaluator, stop_on_loop: bool
) -> None:
    # two pollers, each run by a tool call of one message and checking its own job twice:
    # read as one sequence their checks closed "cycle job_status → job_status", and with
    # stop_on_loop=True the guard refused the second poller's last check; their steps
    # were named after the agent that ran the tool
    instrumentation = instrument(evaluator, stop_on_loop=stop_on_loop)

    async def run(polls: dict[str, int]) -> str:
        return str(await instrumentation.guard(coordinator_of_pollers(polls).run("Watch A, B")))

    try:
        assert asyncio.run(run({"A": 2, "B": 2})) == "Both are done."
        asyncio.run(run({"A": 4, "B": 2}))  # poller A checks its job a third time
        worked, looped = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    checks = [s for s in worked.spans if s.name == "job_status"]
    assert sorted(
        (s.tool_call.id, s.tool_call.arguments, s.output, s.attributes.get(AGENT_NAME))
        for s in checks
        if s.tool_call is not None
    ) == [
        ("A1", {"job": "A"}, "running", "poller_a"),
        ("A2", {"job": "A"}, "done", "poller_a"),
        ("B1", {"job": "B"}, "running", "poller_b"),
        ("B2", {"job": "B"}, "done", "poller_b"),
    ]
    assert (worked.status, worked.alerts) == (RunStatus.OK, [])
    loops = ToolCallLoops().measure(worked)
    assert (loops.score, loops.reason) == (1.0, "no repeated calls or cycles among 6 tool calls")
    # the poller's own run was not handed to guard(): its looping checks are refused, the
    # runs go on
    refused = [s.tool_call.id for s in looped.spans if s.tool_call is not None and s.error]
    assert (looped.status, refused) == (RunStatus.OK, ["A3", "A4"] if stop_on_loop else [])
    [alert] = looped.alerts
    assert (alert.pattern, [(c.name, c.arguments) for c in alert.calls]) == (
        "repeated_call",
        [("job_status", {"job": "A"})] * 3,
    )
    assert ToolCallLoops().measure(looped).reason == (
        'job_status called 3 times with the same arguments {"job": "A"}'
    )


async def execute(code: str) -> dict[str, Any]:
    """A code tool as CodeActAgent's docs write one: the printed output, or the error."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(code, {})  # the scripted model's own code, in the test
    except Exception as exc:
        return {"output": printed.getvalue(), "error": f"{type(exc).__name__}: {exc}"}
    return {"output": printed.getvalue(), "error": None}


@pytest.mark.parametrize(
    ("code", "reply", "shown", "score"),
    [
        ("print(6 * 7)", "6 times 7 is 42.", "{'output': '42\\n', 'error': None}", 1.0),
        (
            "print(1 / 0)",
            "That failed: you cannot divide by zero.",
            "{'output': '', 'error': 'ZeroDivisionError: division by zero'}",
            0.5,
        ),
    ],
)
def test_a_code_agents_run_that_worked_has_no_failed_call(
    evaluator: OnlineEvaluator, code: str, reply: str, shown: str, score: float
) -> None:
    # CodeActAgent shows the model its code tool's dict as str(): "{'output': '42\n',
    # 'error': None}" says "error" and is no JSON, so the run that worked had a failed call
    # (tool_failures 0.0)
    def replies(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role == MessageRole.ASSISTANT for m in messages):
            return answer(reply)
        return answer(f"Let me compute.\n<execute>\n{code}\n</execute>")

    agent = CodeActAgent(
        code_execute_fn=execute, llm=MockFunctionCallingLLM(response_generator=replies)
    )
    answered, trace = agent_run(evaluator, agent, "Compute it.")
    assert answered == reply
    [call] = trace.tool_calls()
    assert (call.name, call.arguments, call.result, call.error) == (
        "execute",
        {"code": code},
        shown,
        None,
    )
    result = ToolFailures().measure(trace)
    assert (result.score, result.metadata["failed"]) == (score, int(score < 1))


class Order(BaseModel):
    order_id: str
    status: str
    error: str | None = None


def test_a_tool_that_returns_a_model_with_no_error_did_not_fail(
    evaluator: OnlineEvaluator,
) -> None:
    # a tool that returns a pydantic model: LlamaIndex shows the model its str(),
    # "order_id='A-1' status='shipped' error=None", which says "error": the run scored
    # tool_failures 0.0
    def lookup(order_id: str) -> Order:
        """Status of an order."""
        return Order(order_id=order_id, status="shipped")

    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(lookup, name="lookup_order")],
        llm=MockFunctionCallingLLM(response_generator=calls_then_answer),
    )
    answered, trace = agent_run(evaluator, agent, "Where is A-1?")
    assert answered == "A-1 has shipped."
    [call] = trace.tool_calls()
    assert (call.arguments, call.result, call.error) == (
        {"order_id": "A-1"},
        "order_id='A-1' status='shipped' error=None",
        None,
    )
    assert ToolFailures().measure(trace).score == 1.0


def test_an_mcp_tool_whose_server_said_the_call_failed_failed(evaluator: OnlineEvaluator) -> None:
    # an MCP tool as llama-index-tools-mcp makes one: a FunctionTool whose function returns
    # the session's CallToolResult, which LlamaIndex shows the model as its str(). The
    # server said isError=True; the text says no "error", so the call had worked
    pytest.importorskip("mcp", reason="the MCP SDK comes with the crewai extra")
    from mcp.server.fastmcp import FastMCP
    from mcp.shared.memory import create_connected_server_and_client_session
    from mcp.types import CallToolResult, TextContent

    server = FastMCP("orders")

    # no return annotation: FastMCP would look its name up in this module's globals
    @server.tool()
    def lookup_order(order_id: str):  # type: ignore[no-untyped-def]
        """Status of an order."""
        said = TextContent(type="text", text=f"Order {order_id} not found")
        return CallToolResult(isError=True, content=[said])

    async def run() -> str:
        async with create_connected_server_and_client_session(server._mcp_server) as session:

            async def call(**arguments: Any) -> Any:
                return await session.call_tool("lookup_order", arguments)

            tool = FunctionTool.from_defaults(
                async_fn=call, name="lookup_order", description="Status of an order."
            )
            agent = FunctionAgent(
                tools=[tool], llm=MockFunctionCallingLLM(response_generator=calls_then_answer)
            )
            return str(await agent.run("Where is A-1?"))

    instrumentation = instrument(evaluator)
    try:
        answered = asyncio.run(run())
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    assert answered == "A-1 has shipped."
    [call] = trace.tool_calls()
    assert (call.arguments, call.result, call.error, call.failed) == (
        {"order_id": "A-1"},
        "meta=None content=[TextContent(type='text', text='Order A-1 not found', "
        "annotations=None, meta=None)] structuredContent=None isError=True",
        None,
        True,
    )
    result = ToolFailures().measure(trace)
    assert (result.score, result.metadata["unrecovered"]) == (0.0, 1)


def test_tool_calls_in_a_custom_workflow_step_are_recorded(evaluator: OnlineEvaluator) -> None:
    async def main() -> Any:
        result = await OrderFlow().run(order="A-1")
        with pytest.raises(ValueError, match="no order Z-9"):
            await FailingFlow().run(order="Z-9")
        return result

    instrumentation = instrument(evaluator)
    try:
        result = asyncio.run(main())
    finally:
        instrumentation.uninstrument()
    assert result == "shipped; no order Z-9; shipped"
    handled, failed = evaluator.captured()
    # it was: no tool span, input None, and every score perfect
    assert (handled.status, handled.input, handled.output) == (
        RunStatus.OK,
        {"order": "A-1"},
        "shipped; no order Z-9; shipped",
    )
    assert [(c.id, c.name, c.arguments, c.result, c.error) for c in handled.tool_calls()] == [
        (None, "strict_lookup", {"order_id": "A-1"}, "shipped", None),
        (None, "strict_lookup", {"order_id": "Z-9"}, None, "ValueError: no order Z-9"),
        (None, "strict_lookup", {"order_id": "A-1"}, "shipped", None),
    ]
    [step_span] = handled.spans_of(SpanKind.CHAIN)
    assert {s.parent_id for s in handled.spans_of(SpanKind.TOOL)} == {step_span.id}
    assert (failed.status, failed.input) == (RunStatus.ERROR, {"order": "Z-9"})
    assert [(c.arguments, c.error) for c in failed.tool_calls()] == [
        ({"order_id": "Z-9"}, "ValueError: no order Z-9")
    ]


def test_a_run_the_guard_cannot_stop_says_it_went_on(
    evaluator: OnlineEvaluator, caplog: pytest.LogCaptureFixture
) -> None:
    # stop_on_loop=True, but the run is not handed to guard(...): its looping calls are
    # refused, the model gives up and answers, and the trace says just that
    def loop_until_refused(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        last = messages[-1]
        if last.role == MessageRole.TOOL and "refused" in str(last.content):
            return answer("I could not look it up.")
        call = ToolCallBlock(
            tool_call_id=f"c{len(messages)}",
            tool_name="lookup_order",
            tool_kwargs={"order_id": "A-1"},
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])

    instrumentation = instrument(evaluator, stop_on_loop=True)
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(lookup_order)],
        llm=MockFunctionCallingLLM(response_generator=loop_until_refused),
    )
    try:
        with caplog.at_level("WARNING", logger="agenteval"):

            async def main() -> Any:
                return await agent.run("Where is A-1?")

            output = asyncio.run(main())
    finally:
        instrumentation.uninstrument()
    assert str(output) == "I could not look it up."
    [trace] = evaluator.captured()
    threshold = evaluator.guard.repeat_threshold
    calls = trace.tool_calls()
    # it was: status "stopped" although the run went on and answered
    assert (trace.status, trace.status_reason, trace.output) == (
        RunStatus.OK,
        None,
        "I could not look it up.",
    )
    assert [(c.name, c.arguments, c.result) for c in calls[:-1]] == [
        ("lookup_order", {"order_id": "A-1"}, "shipped")
    ] * (threshold - 1)
    refused = calls[-1]
    assert (refused.name, refused.arguments, refused.result) == (
        "lookup_order",
        {"order_id": "A-1"},
        None,
    )
    assert refused.error is not None and refused.error.startswith("refused by the loop guard")
    [alert] = trace.alerts
    assert (alert.pattern, alert.count, alert.stopped) == ("repeated_call", threshold, False)
    said = [r.getMessage() for r in caplog.records if "cannot stop it" in r.getMessage()]
    assert said == [
        "agenteval: the loop guard refuses the looping calls of a LlamaIndex run but cannot "
        "stop it: hand the run to the instrumentation to stop it "
        "(handler = instrumentation.guard(agent.run(...)))"
    ]


class PollingFlow(Workflow):
    lookup = FunctionTool.from_defaults(strict_lookup)

    @step
    async def poll(self, ev: StartEvent) -> StopEvent:
        for _ in range(4):
            await self.lookup.acall(order_id="A-1")
        return StopEvent(result="polled")


@pytest.mark.parametrize("stop_on_loop", [False, True])
def test_a_loop_of_a_steps_own_calls_is_an_alert(
    evaluator: OnlineEvaluator, stop_on_loop: bool
) -> None:
    # a step's own call cannot be refused, so with or without stop_on_loop the guard
    # watches it and alerts; the run goes on
    instrumentation = instrument(evaluator, stop_on_loop=stop_on_loop)

    async def main() -> Any:
        return await PollingFlow().run()

    try:
        assert asyncio.run(main()) == "polled"
    finally:
        instrumentation.uninstrument()
    [trace] = evaluator.captured()
    assert [c.result for c in trace.tool_calls()] == ["shipped"] * 4
    assert trace.status is RunStatus.OK
    [alert] = trace.alerts
    assert (alert.pattern, alert.count, alert.stopped, alert.trace_id) == (
        "repeated_call",
        evaluator.guard.repeat_threshold,
        False,
        trace.id,
    )


def flaky_flow(failures: int) -> Workflow:
    """A workflow whose step, retried by its policy up to three times, looks up A-1 itself:
    the lookup times out ``failures`` times first."""
    attempts: list[str] = []

    def lookup(order_id: str) -> str:
        """Status of an order by id."""
        attempts.append(order_id)
        if len(attempts) <= failures:
            raise ConnectionError("timed out")
        return "shipped"

    class Flaky(Workflow):
        tool = FunctionTool.from_defaults(lookup)

        @step(retry_policy=retry_policy(wait=wait_none(), stop=stop_after_attempt(3)))
        async def fetch(self, ev: StartEvent) -> StopEvent:
            if ev.get("poll"):  # a loop in the step itself
                for _ in range(4):
                    await self.tool.acall(order_id="A-2")
                return StopEvent(result="polled")
            found = await self.tool.acall(order_id="A-1")
            if found.is_error:
                raise ConnectionError(str(found.content))
            return StopEvent(result=f"A-1 is {found.content}")

    return Flaky(timeout=10)


@pytest.mark.parametrize("failures", [2, 3])
def test_a_step_its_retry_policy_ran_again_made_its_call_once(
    evaluator: OnlineEvaluator, failures: int
) -> None:
    # the step timed out and the workflow's retry policy ran it again on the same event:
    # each run of the lookup was a call of its own, two failed calls in a run that worked
    # (tool_failures 0.33), "lookup called 3 times with the same arguments" (0.0), and
    # the guard alerted at the third attempt. Its runs are one call's now, as LangGraph's
    # RetryPolicy reruns are
    instrumentation = instrument(evaluator, stop_on_loop=True)

    async def main() -> Any:
        return await flaky_flow(failures).run()

    try:
        with contextlib.suppress(ConnectionError):  # three timeouts: the workflow raises
            assert asyncio.run(main()) == "A-1 is shipped"
    finally:
        instrumentation.uninstrument()
    [trace] = evaluator.captured()
    ended = ("shipped", None) if failures == 2 else (None, "ConnectionError: timed out")
    assert [(c.name, c.arguments, c.result, c.error) for c in trace.tool_calls()] == [
        ("lookup", {"order_id": "A-1"}, *ended)
    ]
    assert [(c.result, c.error) for c in trace.tool_calls(every_run=True)] == [
        (None, "ConnectionError: timed out")
    ] * 2 + [ended]
    assert trace.status is (RunStatus.OK if failures == 2 else RunStatus.ERROR)
    failed = ToolFailures().measure(trace)
    # worked: no call failed; three timeouts: 1 − (1 failed + 1 not recovered) / (2 × 1)
    assert (failed.score, failed.metadata["runs_retried"]) == (1.0 if failures == 2 else 0.0, 2)
    assert (trace.alerts, ToolCallLoops().measure(trace).score) == ([], 1.0)


def test_a_loop_in_a_step_with_a_retry_policy_is_still_a_loop(evaluator: OnlineEvaluator) -> None:
    instrumentation = instrument(evaluator)

    async def main() -> Any:
        return await flaky_flow(0).run(poll=True)

    try:
        assert asyncio.run(main()) == "polled"
    finally:
        instrumentation.uninstrument()
    [trace] = evaluator.captured()
    assert [c.arguments for c in trace.tool_calls()] == [{"order_id": "A-2"}] * 4
    [alert] = trace.alerts
    assert (alert.pattern, alert.count) == ("repeated_call", 3)
    assert ToolCallLoops().measure(trace).score == 0.0


def test_a_tool_that_waits_for_a_human_is_one_call_and_a_run_stopped_there_is_paused(
    evaluator: OnlineEvaluator,
) -> None:
    # LlamaIndex's human-in-the-loop: ctx.wait_for_event suspends the tool's step by
    # raising WaitingForEvent, and runs the step again once the event comes. The suspension
    # was recorded as a failed call (then the call again): tool_failures saw a failure that
    # never happened. A run stopped while it waits (its context saved for later) was
    # "cancelled"; it is paused for a human, as a LangGraph interrupt is
    async def approved_at_once() -> str:
        return await answered_at_once(refund_agent().run("Refund A-1"))

    async def paused_then_resumed() -> str:
        agent = refund_agent()  # the app keeps the run's context for later
        return await resume(agent, await saved_when_it_asks(agent.run("Refund A-2")))

    instrumentation = instrument(evaluator, session_id="u1")
    try:
        assert asyncio.run(approved_at_once()) == "Refunded."
        assert asyncio.run(paused_then_resumed()) == "Refunded."
        at_once, paused, resumed = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    calls = [(c.id, c.name, c.arguments, c.result, c.error) for c in at_once.tool_calls()]
    assert calls == [("c1", "refund_once_approved", {"order_id": "A-1"}, "refunded", None)]
    assert (at_once.status, at_once.output) == (RunStatus.OK, "Refunded.")
    assert (paused.input, paused.status, paused.status_reason, paused.output) == (
        "Refund A-2",
        RunStatus.INTERRUPTED,
        "waiting for HumanResponseEvent: Refund A-2?",
        None,
    )
    assert paused.tool_calls() == []  # the call waits: it runs in the resumed run
    assert [(c.id, c.result, c.error) for c in resumed.tool_calls()] == [("c1", "refunded", None)]
    # the resumed run answers the paused run's request, and names that run (as a LangGraph
    # run resumed with Command(resume=...) does); it started without one, and coherence
    # assumed a perfect score for its empty input
    assert (resumed.input, resumed.output, resumed.status) == (
        "Refund A-2",
        "Refunded.",
        RunStatus.OK,
    )
    assert resumed.metadata == {"resumes_trace_id": paused.id}
    assert "empty input" not in Coherence().measure(resumed).reason


def test_a_run_waiting_for_a_human_when_the_evaluator_closes_is_paused(tmp_path: Path) -> None:
    # a server shutting down while a workflow waits for a human's approval: the run was
    # captured as it stood, but as "unfinished" (how it ended unknown, nothing scored),
    # though the adapter knew it was paused for a human, as it is when the run stops there
    evaluator = OnlineEvaluator(capture=tmp_path / "capture.jsonl", log=False)
    instrumentation = instrument(evaluator, session_id="u1")

    async def close_while_waiting() -> None:
        handler = refund_agent().run("Refund A-3")
        async for event in handler.stream_events():
            if isinstance(event, InputRequiredEvent):
                evaluator.close()  # the server stops; the human has not answered
                break
        await handler.cancel_run()
        with pytest.raises(WorkflowCancelledByUser):
            await handler

    try:
        asyncio.run(close_while_waiting())
    finally:
        instrumentation.uninstrument()
    [trace] = evaluator.captured()
    assert (trace.input, trace.status, trace.status_reason, trace.output, trace.error) == (
        "Refund A-3",
        RunStatus.INTERRUPTED,
        "waiting for HumanResponseEvent: Refund A-3?",
        None,
        None,
    )
    [call] = trace.spans_of(SpanKind.LLM)
    assert [(c.id, c.name, c.arguments) for c in call.requested_tool_calls] == [
        ("c1", "refund_once_approved", {"order_id": "A-3"})
    ]
    assert trace.tool_calls() == []  # the call waits: it runs when the run resumes
    coherence = Coherence().measure(trace)  # no answer yet: nothing to compare
    assert (coherence.skipped, coherence.reason) == (
        True,
        "not scored: the run ended with status interrupted",
    )


@pytest.mark.parametrize("stop", ["cancelled to resume later", "evaluator closed"])
def test_a_workflow_stopped_while_it_asks_a_human_is_paused(tmp_path: Path, stop: str) -> None:
    # a step that returns InputRequiredEvent leaves the workflow waiting for a human; the
    # app saving its context and cancelling the run (to resume on the answer) was recorded
    # as "cancelled", a failure (a regression case, a failed suite attempt), and a server
    # closing meanwhile as "unfinished"; only a tool's ctx.wait_for_event was seen as a pause
    evaluator = OnlineEvaluator(capture=tmp_path / "capture.jsonl", log=False)
    instrumentation = instrument(evaluator, session_id="u1")

    async def answered() -> str:
        return await answered_at_once(ApproveRefund(timeout=10).run(order="A-1"))

    async def stopped_while_asking() -> None:
        handler = ApproveRefund(timeout=10).run(order="A-2")
        async for event in handler.stream_events():
            if isinstance(event, InputRequiredEvent):
                if stop == "evaluator closed":
                    evaluator.close()
                break
        await handler.cancel_run()
        with pytest.raises(WorkflowCancelledByUser):
            await handler

    try:
        assert asyncio.run(answered()) == "Refunded."
        asyncio.run(stopped_while_asking())
    finally:
        instrumentation.uninstrument()
        evaluator.close()
    done, paused = evaluator.captured()
    assert (done.status, done.status_reason, done.output) == (RunStatus.OK, None, "Refunded.")
    assert [s.name for s in done.spans] == [
        "ApproveRefund.run",
        "ApproveRefund.ask",
        "ApproveRefund.act",
    ]
    # the human's answer and what it answered, which a judge of the run is told: the answer
    # had been left out, then given alone ("yes" to what?)
    assert done.metadata == {"human_answers": ["yes"], "human_questions": ["Refund A-1?"]}
    assert describe_trace(EvalCase.of(done)).splitlines()[1] == (
        'a human was asked "Refund A-1?" while the run went on, and answered: yes'
    )
    assert (paused.input, paused.status, paused.status_reason, paused.output, paused.error) == (
        {"order": "A-2"},
        RunStatus.INTERRUPTED,
        "waiting for a response to InputRequiredEvent: Refund A-2?",
        None,
        None,
    )
    assert [s.name for s in paused.spans] == ["ApproveRefund.run", "ApproveRefund.ask"]


def test_a_run_resumed_from_a_saved_context_answers_the_paused_request(
    evaluator: OnlineEvaluator,
) -> None:
    # a run resumed from the context a paused run saved starts with no request of its
    # own: its trace had no input, so coherence assumed a perfect score (a vacuous pass)
    # and a judge saw no request. Its steps carry what it goes on from: the conversation
    # so far, or the human's answer it takes up
    async def paused_and_resumed(workflow: Any) -> str:
        return await resume(workflow, await saved_when_it_asks(workflow.run(order="A-4")))

    async def paused_elsewhere() -> str:  # before this evaluator instruments LlamaIndex
        return json.dumps(await saved_when_it_asks(refund_agent().run("Refund A-5")))

    saved_elsewhere = json.loads(asyncio.run(paused_elsewhere()))
    instrumentation = instrument(evaluator, session_id="u1")
    try:
        assert asyncio.run(paused_and_resumed(ApproveRefund(timeout=10))) == "Refunded."
        assert asyncio.run(resume(refund_agent(), saved_elsewhere)) == "Refunded."
        paused, steps_resumed, agent_resumed = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    assert paused.input == {"order": "A-4"}
    # a workflow of steps: the human's answer is what the resumed run takes up (LangGraph's
    # metadata["resume"]), and, no request being known, its input
    assert (steps_resumed.input, steps_resumed.output, steps_resumed.status) == (
        "yes",
        "Refunded.",
        RunStatus.OK,
    )
    assert steps_resumed.metadata == {"resume": "yes"}
    assert [s.name for s in steps_resumed.spans] == ["ApproveRefund.run", "ApproveRefund.act"]
    # an agent resumed from a context saved elsewhere: its request, from the conversation
    assert (agent_resumed.input, agent_resumed.output, agent_resumed.status) == (
        "Refund A-5",
        "Refunded.",
        RunStatus.OK,
    )
    assert agent_resumed.metadata == {}
    assert [(c.name, c.arguments, c.result) for c in agent_resumed.tool_calls()] == [
        ("refund_once_approved", {"order_id": "A-5"}, "refunded")
    ]


@pytest.mark.parametrize("early_stopping_method", ["force", "generate"])
def test_a_run_at_max_iterations_is_a_limit_whether_it_raises_or_answers(
    evaluator: OnlineEvaluator, early_stopping_method: str
) -> None:
    # with "generate", LlamaIndex asks the model for a last answer without tools at the
    # limit: the run was "ok", its forced answer scored as a finished run's (CrewAI's
    # forced final answer at max_iter was already a limit)
    def reply(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if "maximum number of iterations" in str(messages[-1].content):
            return answer("A-1 may have shipped.")
        done = sum(1 for m in messages if m.role == MessageRole.TOOL)
        block = ToolCallBlock(
            tool_call_id=f"c{done}", tool_name="lookup_order", tool_kwargs={"order_id": "A-1"}
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(lookup_order)],
        llm=MockFunctionCallingLLM(response_generator=reply),
        early_stopping_method=early_stopping_method,
    )

    async def run() -> str:
        return str(await agent.run("Where is A-1?", max_iterations=2))

    instrumentation = instrument(evaluator)
    try:
        if early_stopping_method == "force":
            with pytest.raises(Exception, match="Max iterations of 2 reached"):
                asyncio.run(run())
        else:
            assert asyncio.run(run()) == "A-1 may have shipped."
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    assert trace.status is RunStatus.LIMIT
    assert [c.id for c in trace.tool_calls()] == ["c0"]  # the second turn is the limit
    if early_stopping_method == "generate":
        assert trace.status_reason == (
            "reached max_iterations (2): LlamaIndex asked for a final answer"
        )
        assert trace.output == "A-1 may have shipped."


def test_an_agents_structured_output_is_no_tool_call_of_its_own(
    evaluator: OnlineEvaluator,
) -> None:
    # FunctionAgent(output_cls=...) shapes the answer by having the LLM "call" the schema
    # as a function: that was recorded as a call of a tool "OrderStatus" the agent never had,
    # and the schema was listed among its tools
    from pydantic import BaseModel

    class OrderStatus(BaseModel):
        order_id: str
        status: str

    def reply(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if "provided schema" in str(messages[-1].content):
            shaped = {"order_id": "A-1", "status": "shipped"}
            block = ToolCallBlock(tool_call_id="s1", tool_name="OrderStatus", tool_kwargs=shaped)
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])
        return calls_then_answer(messages)

    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(fn=lookup_order)],
        llm=MockFunctionCallingLLM(response_generator=reply),
        output_cls=OrderStatus,
    )

    async def run() -> Any:
        return await agent.run("Where is A-1?")

    instrumentation = instrument(evaluator)
    try:
        result = asyncio.run(run())
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    assert result.structured_response == {"order_id": "A-1", "status": "shipped"}
    assert [(c.id, c.name, c.arguments, c.result) for c in trace.tool_calls()] == [
        ("c1", "lookup_order", {"order_id": "A-1"}, "shipped")
    ]
    assert [t.name for t in trace.tools] == ["lookup_order"]
    # the shaping is a model call of the run, with the shaped answer as its output, made by
    # the framework after the agent answered: no step of the agent
    assert [s.output for s in trace.spans if s.kind is SpanKind.LLM][-1] == (
        '{"order_id":"A-1","status":"shipped"}'
    )
    assert [(step.output, [c.id for c in step.tool_calls]) for step in trace.steps()] == [
        (None, ["c1"]),
        ("A-1 has shipped.", []),
    ]
    assert (trace.output, trace.status) == ("A-1 has shipped.", RunStatus.OK)


def test_a_memory_blocks_model_calls_are_no_steps(evaluator: OnlineEvaluator) -> None:
    # a FactExtractionMemoryBlock asks a model for facts as the history it stores overflows
    # (while the run stores the user's message): that call was a step of the agent, its
    # "<facts>" the step's output a judge read
    from llama_index.core.memory import FactExtractionMemoryBlock, Memory

    facts = "<facts><fact>The user has order A-1.</fact></facts>"

    def reply(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if "Where is" in str(messages[-1].content) or messages[-1].role == MessageRole.TOOL:
            return calls_then_answer(messages)
        return answer(facts)

    llm = MockFunctionCallingLLM(response_generator=reply)
    block = FactExtractionMemoryBlock(name="facts", llm=llm, priority=1)
    memory = Memory.from_defaults(
        session_id="m-1",
        token_limit=60,
        chat_history_token_ratio=0.2,
        token_flush_size=10,
        memory_blocks=[block],
    )
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(fn=lookup_order)], llm=llm)

    async def run() -> None:
        await agent.run(
            "Where is A-1? It was to come yesterday with all my winter things", memory=memory
        )
        await agent.run("Where is A-1 now? Please tell me once more, in detail", memory=memory)

    instrumentation = instrument(evaluator)
    try:
        asyncio.run(run())
        first, second = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    extracted = [s for s in second.spans if s.kind is SpanKind.LLM and s.output == facts]
    assert len(extracted) == 1  # the call is in the trace (its tokens count), and
    for trace in (first, second):  # no step of the agent
        assert [(step.output, [c.id for c in step.tool_calls]) for step in trace.steps()] == [
            (None, ["c1"]),
            ("A-1 has shipped.", []),
        ]


class ProviderLLM(MockFunctionCallingLLM):
    """A function-calling model whose replies carry the provider's raw response, as a
    LlamaIndex provider integration keeps it (streamed: the last chunk's)."""

    raw_of: Any = None
    """The raw response to a reply: (message, streamed) → raw."""

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        message = self._get_response_generator()(messages, **kwargs)
        return ChatResponse(message=message, raw=self.raw_of(message, False))

    @llm_chat_callback()
    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        message = self._get_response_generator()(messages, **kwargs)

        async def chunks() -> ChatResponseAsyncGen:
            raw = self.raw_of(message, True)
            yield ChatResponse(message=message, delta=message.content or "", raw=raw)

        return chunks()


def openai_raw(reason: str, streamed: bool) -> Any:
    """What llama-index-llms-openai keeps: the SDK's ChatCompletion (a chunk, streamed)."""
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    choice: dict[str, Any] = {"index": 0, "finish_reason": reason}
    if streamed:
        choice["delta"] = {}
        return ChatCompletionChunk.model_validate(
            {"id": "r", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [choice]}
        )  # fmt: skip
    choice["message"] = {"role": "assistant", "content": None}
    return ChatCompletion.model_validate(
        {"id": "r", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
    )


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("provider", "reasons"),
    [
        ("openai", ("tool_calls", "length")),
        ("anthropic", ("tool_use", "max_tokens")),  # dict(Message)
        ("ollama", ("stop", "length")),  # dict(ChatResponse)
    ],
)
def test_an_answer_cut_at_the_token_limit_is_no_completed_run(
    evaluator: OnlineEvaluator, provider: str, reasons: tuple[str, str], streaming: bool
) -> None:
    # the model stopped mid-sentence at its output token limit: the run read as completed,
    # and its half answer was scored (and passed a suite) as the answer
    def reply(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role == MessageRole.TOOL for m in messages):
            return answer("A-1 has shipped and should arrive")
        return calls_then_answer(messages)

    def raw_of(message: ChatMessage, streamed: bool) -> Any:
        reason = reasons[0] if message.blocks and message.content is None else reasons[1]
        if provider == "openai":
            return openai_raw(reason, streamed)
        key = "stop_reason" if provider == "anthropic" else "done_reason"
        return {"model": "m", key: reason}

    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(lookup_order)],
        llm=ProviderLLM(response_generator=reply, raw_of=raw_of),
        streaming=streaming,
    )

    answered, trace = agent_run(evaluator, agent, "Where is A-1?")
    assert answered == "A-1 has shipped and should arrive"
    assert [
        s.attributes.get("gen_ai.response.finish_reasons") for s in trace.spans_of(SpanKind.LLM)
    ] == [[reasons[0]], [reasons[1]]]
    assert (trace.status, trace.status_reason, trace.output) == (
        RunStatus.LIMIT,
        f"the answer was cut at the model's output token limit (finish reason {reasons[1]})",
        "A-1 has shipped and should arrive",
    )
    assert [(c.id, c.arguments, c.result) for c in trace.tool_calls()] == [
        ("c1", {"order_id": "A-1"}, "shipped")
    ]


def test_an_answer_the_model_finished_is_a_completed_run(evaluator: OnlineEvaluator) -> None:
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(lookup_order)],
        llm=ProviderLLM(
            response_generator=calls_then_answer,
            raw_of=lambda message, streamed: openai_raw("stop", streamed),
        ),
    )

    answered, trace = agent_run(evaluator, agent, "Where is A-1?")
    assert answered == "A-1 has shipped."
    assert (trace.status, trace.status_reason, trace.output) == (
        RunStatus.OK,
        None,
        "A-1 has shipped.",
    )
    assert trace.spans_of(SpanKind.LLM)[-1].attributes["gen_ai.response.finish_reasons"] == ["stop"]


@pytest.mark.parametrize(
    ("provider", "refused"),
    [("openai", "I can't help with that."), ("anthropic", ""), ("safety stop", "")],
)
def test_a_providers_refusal_is_the_answer_and_not_scored_as_an_empty_one(
    evaluator: OnlineEvaluator, provider: str, refused: str
) -> None:
    # a refusal carries no text (OpenAI's refusal field, Anthropic's refusal stop, a safety
    # stop): the run's answer read as empty, which coherence assumes coherent (1.0)
    def raw_of(message: ChatMessage, streamed: bool) -> Any:
        if provider == "openai":
            from openai.types.chat import ChatCompletion

            choice = {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": None, "refusal": refused},
            }
            return ChatCompletion.model_validate(
                {"id": "r", "object": "chat.completion", "created": 0, "model": "m",
                 "choices": [choice]}
            )  # fmt: skip
        if provider == "anthropic":
            return {"model": "m", "stop_reason": "refusal"}
        return {"model": "m", "finish_reason": "SAFETY"}

    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(lookup_order)],
        llm=ProviderLLM(
            response_generator=lambda messages, **_: ChatMessage(role=MessageRole.ASSISTANT),
            raw_of=raw_of,
        ),
        streaming=False,
    )

    _, trace = agent_run(evaluator, agent, "How do I pick a lock?")
    [model_call] = trace.spans_of(SpanKind.LLM)
    assert (model_call.output, model_call.attributes["agenteval.refusal"]) == (refused, refused)
    assert trace.refusal() == refused
    assert trace.status is RunStatus.OK
    score = Coherence().measure(trace)
    assert (score.score, score.skipped, score.reason) == (
        None,
        True,
        "not scored: the model refused to answer",
    )


@pytest.mark.parametrize(
    ("finish_reason", "status", "status_reason"),
    [
        ("stop", RunStatus.OK, None),
        (
            "length",
            RunStatus.LIMIT,
            "the answer was cut at the model's output token limit (finish reason length)",
        ),
    ],
)
def test_a_query_engines_answer_from_a_completion_model_is_its_model_call(
    evaluator: OnlineEvaluator, finish_reason: str, status: RunStatus, status_reason: str | None
) -> None:
    # a query engine asks a completion model (no chat model) for its answer: the trace had
    # no input (the query), no model call and no tokens, and coherence assumed an empty
    # input coherent (1.0)
    model = CompletionModel(finish_reason=finish_reason)
    engine = orders_index().as_query_engine(llm=model)
    instrumentation = instrument(evaluator)
    try:
        answered = str(engine.query("When did A-1 ship?"))
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    assert answered == "A-1 shipped on Monday."
    [prompt] = model.prompts
    assert "Order A-1 shipped on Monday." in prompt and "When did A-1 ship?" in prompt
    assert (trace.input, trace.output, trace.status, trace.status_reason) == (
        "When did A-1 ship?",
        "A-1 shipped on Monday.",
        status,
        status_reason,
    )
    [model_call] = trace.spans_of(SpanKind.LLM)
    assert (model_call.name, model_call.input, model_call.output) == (
        "instruct-1",
        prompt,
        "A-1 shipped on Monday.",
    )
    assert model_call.attributes == {
        "gen_ai.operation.name": "text_completion",
        "gen_ai.request.model": "instruct-1",
        "gen_ai.usage.input_tokens": 57,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": [finish_reason],
    }
    assert Coherence().measure(trace).reason.startswith("cosine distance between input and output")
    # what the answer was grounded on: the retrieval, with the documents it found
    [retrieval] = trace.spans_of(SpanKind.RETRIEVER)
    assert (retrieval.name, retrieval.input) == (
        "VectorIndexRetriever.retrieve",
        "When did A-1 ship?",
    )
    [found] = retrieval.output
    assert (found["content"], round(found["score"], 9)) == ("Order A-1 shipped on Monday.", 1.0)


def test_a_chat_over_a_completion_is_one_model_call(evaluator: OnlineEvaluator) -> None:
    # a chat model that completes a prompt in its chat method (LlamaIndex's CustomLLM) emits
    # a chat and a completion for one call; a query engine's predict emits neither: the
    # model call was lost under predict, and would count twice without it
    model = CompletionModel(chat_model=True)
    engine = orders_index().as_query_engine(llm=model)
    instrumentation = instrument(evaluator)
    try:
        asyncio.run(engine.aquery("When did A-1 ship?"))
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    [model_call] = trace.spans_of(SpanKind.LLM)
    assert model_call.attributes["gen_ai.operation.name"] == "chat"
    assert [m["role"] for m in model_call.input] == ["system", "user"]
    assert "When did A-1 ship?" in model_call.input[-1]["content"]
    assert model_call.output == "A-1 shipped on Monday."
    assert (trace.input, trace.output) == ("When did A-1 ship?", "A-1 shipped on Monday.")


def test_a_chat_engines_request_is_the_runs_input(evaluator: OnlineEvaluator) -> None:
    engine = orders_index().as_chat_engine(chat_mode="context", llm=CompletionModel())
    instrumentation = instrument(evaluator)
    try:
        engine.chat("When did A-1 ship?")
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    assert (trace.input, trace.output) == ("When did A-1 ship?", "A-1 shipped on Monday.")
    [model_call] = trace.spans_of(SpanKind.LLM)
    assert "When did A-1 ship?" in model_call.input


def react_model() -> CompletionModel:
    """A local model answering a ReAct agent: it looks A-1 up, then answers."""
    return CompletionModel(
        model="local-7b",
        replies=[
            'Thought: I need the status.\nAction: lookup_order\nAction Input: {"order_id": "A-1"}',
            "Thought: I can answer.\nAnswer: A-1 has shipped.",
        ],
    )


@pytest.mark.parametrize("streaming", [False, True])
def test_a_local_models_streamed_call_is_one_call(
    evaluator: OnlineEvaluator, streaming: bool
) -> None:
    # a local model (LlamaIndex's CustomLLM) streams a chat by reading its stream_complete
    # as the agent reads the stream: that method starts after the chat method returned,
    # under the agent's step, and its events recorded the call a second time (tokens,
    # steps and requested calls twice, so the loop guard saw each call twice)
    model = react_model()
    agent = ReActAgent(
        tools=[FunctionTool.from_defaults(lookup_order)], llm=model, streaming=streaming
    )

    answered, trace = agent_run(evaluator, agent, "Where is A-1?")
    assert answered == "A-1 has shipped."
    calls = trace.spans_of(SpanKind.LLM)
    assert [(s.name, s.output, [c.name for c in s.requested_tool_calls]) for s in calls] == [
        ("local-7b", model.replies[0], ["lookup_order"]),
        ("local-7b", model.replies[1], []),
    ]
    assert [s.attributes["gen_ai.usage.input_tokens"] for s in calls] == [57, 57]
    assert [(c.name, c.arguments, c.result) for c in trace.tool_calls()] == [
        ("lookup_order", {"order_id": "A-1"}, "shipped")
    ]
    assert (len(trace.steps()), trace.alerts, len(model.prompts)) == (2, [], 2)


def test_a_react_reply_is_recorded_as_the_model_gave_it_whenever_it_is_read(
    evaluator: OnlineEvaluator,
) -> None:
    # a ReAct agent cuts "Thought: ... Answer:" out of the model's reply in place, after the
    # reply's end event: read later on the recorder's thread (a busy recorder), the model's
    # reply was the cut answer. The recorder is held here until the run has ended.
    model = react_model()
    agent = ReActAgent(tools=[FunctionTool.from_defaults(lookup_order)], llm=model)
    released = threading.Event()
    evaluator.recorder.put((lambda _: released.wait(10),))

    async def run() -> str:
        return str(await agent.run("Where is A-1?"))

    instrumentation = instrument(evaluator)
    try:
        answered = asyncio.run(run())
        released.set()
        [trace] = evaluator.captured()
    finally:
        released.set()
        instrumentation.uninstrument()
    assert answered == "A-1 has shipped."
    assert [s.output for s in trace.spans_of(SpanKind.LLM)] == model.replies
    assert trace.output == "A-1 has shipped."


def read_stream(engine: Any, how: str) -> str:
    """Ask ``engine`` (a query or chat engine that streams) "When did A-1 ship?" and read
    its streamed answer, as a caller does (``how``: query, aquery, chat or achat)."""

    async def read_async() -> str:
        if how == "aquery":
            streamed = await engine.aquery("When did A-1 ship?")
        else:
            streamed = await engine.astream_chat("When did A-1 ship?")
        return "".join([token async for token in streamed.async_response_gen()])

    if how in ("aquery", "achat"):
        return asyncio.run(read_async())
    if how == "query":
        return "".join(engine.query("When did A-1 ship?").response_gen)
    return "".join(engine.stream_chat("When did A-1 ship?").response_gen)


@pytest.mark.parametrize("how", ["query", "aquery", "chat", "achat"])
def test_a_streamed_answer_is_read_by_its_caller_alone_and_is_the_runs(
    evaluator: OnlineEvaluator, how: str
) -> None:
    # a streaming query or chat engine returns a stream its caller reads. The handler
    # turned that response into text on its own thread, which reads the caller's stream
    # (the two raced: "generator already executing"); the run ended before the model was
    # read, its answer None or "" (coherence's 1.0 for an empty answer), and the model
    # call, made as the caller read the stream, became a run of its own
    index = orders_index()
    model = CompletionModel()
    if how in ("query", "aquery"):
        engine = index.as_query_engine(llm=model, streaming=True)
    else:
        engine = index.as_chat_engine(chat_mode="context", llm=model)
    instrumentation = instrument(evaluator)
    try:
        assert read_stream(engine, how) == "A-1 shipped on Monday."
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    assert (trace.status, trace.input, trace.output) == (
        RunStatus.OK,
        "When did A-1 ship?",
        "A-1 shipped on Monday.",
    )
    [model_call] = trace.spans_of(SpanKind.LLM)
    assert (model_call.input, model_call.output, model_call.error) == (
        model.prompts[0],
        "A-1 shipped on Monday.",
        None,
    )
    assert [s.name for s in trace.spans if s.error is not None] == []
    assert Coherence().measure(trace).reason.startswith("cosine distance between input and output")


def test_a_model_call_shows_the_images_audio_and_calls_it_was_sent(
    evaluator: OnlineEvaluator,
) -> None:
    png = b"\x89PNG\r\n" + bytes(range(256)) * 1200  # 300 KB: its data is omitted
    wav = b"RIFF\x24\x00\x00\x00WAVEfmt "  # small: kept whole, as a data URL
    question = ChatMessage(
        role=MessageRole.USER,
        blocks=[
            TextBlock(text="Where is the order on this label?"),
            ImageBlock(image=png, image_mimetype="image/png"),
            ImageBlock(url="https://example.com/label.png", image_mimetype="image/png"),
            AudioBlock(audio=wav, format="wav"),
            ThinkingBlock(content="a label photo"),
        ],
    )
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(lookup_order)],
        llm=MockFunctionCallingLLM(response_generator=calls_then_answer),
    )
    answered, trace = agent_run(evaluator, agent, question)
    assert answered == "A-1 has shipped."
    assert trace.input == "Where is the order on this label?"
    sent = {
        "role": "user",
        "content": [
            {"type": "text", "text": "Where is the order on this label?"},
            {
                "type": "image",
                "mime_type": "image/png",
                "url": "data:image/png;base64,…[base64 data omitted: "
                f"{len(base64.b64encode(png))} characters]",
            },
            {"type": "image", "mime_type": "image/png", "url": "https://example.com/label.png"},
            {
                "type": "audio",
                "mime_type": "audio/wav",
                "url": f"data:audio/wav;base64,{base64.b64encode(wav).decode()}",
            },
            {"type": "thinking", "text": "a label photo"},
        ],
    }
    first, second = trace.spans_of(SpanKind.LLM)
    assert first.input == [sent]
    assert trace.request_media() == ["image", "image", "audio"]
    # the second call was sent the first one's tool call and its result
    assert second.input == [
        sent,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": "lookup_order", "args": {"order_id": "A-1"}, "id": "c1"}],
        },
        {"role": "tool", "content": "shipped"},
    ]


def test_a_models_thinking_is_recorded_and_is_the_thought_of_its_calls(
    evaluator: OnlineEvaluator,
) -> None:
    def thinks(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role == MessageRole.TOOL for m in messages):
            blocks: list[Any] = [ThinkingBlock(content="It says shipped.")]
            return ChatMessage(
                role=MessageRole.ASSISTANT, blocks=[*blocks, TextBlock(text="A-1 has shipped.")]
            )
        call = ToolCallBlock(
            tool_call_id="c1", tool_name="lookup_order", tool_kwargs={"order_id": "A-1"}
        )
        return ChatMessage(
            role=MessageRole.ASSISTANT,
            blocks=[ThinkingBlock(content="Look the order up."), TextBlock(text="Checking."), call],
        )

    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(lookup_order)],
        llm=MockFunctionCallingLLM(response_generator=thinks),
    )
    answered, trace = agent_run(evaluator, agent, "Where is A-1?")
    assert answered == "A-1 has shipped."
    calls = trace.spans_of(SpanKind.LLM)
    assert [(s.output, s.attributes.get(REASONING), s.thought) for s in calls] == [
        ("Checking.", "Look the order up.", "Look the order up.\n\nChecking."),
        ("A-1 has shipped.", "It says shipped.", None),
    ]


def test_messages_that_cannot_be_read_cost_the_input_never_the_call(
    evaluator: OnlineEvaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agenteval_llamaindex._translate as translate

    def unreadable(block: Any) -> dict[str, Any]:
        raise RuntimeError("a block of a kind no one expected")

    monkeypatch.setattr(translate, "_part", unreadable)
    question = ChatMessage(
        role=MessageRole.USER,
        blocks=[TextBlock(text="Where is A-1?"), ImageBlock(url="https://example.com/a.png")],
    )
    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(lookup_order)],
        llm=MockFunctionCallingLLM(response_generator=calls_then_answer),
    )
    answered, trace = agent_run(evaluator, agent, question)
    assert answered == "A-1 has shipped."
    first, second = trace.spans_of(SpanKind.LLM)
    assert (first.input, second.input) == (None, None)
    assert [c.name for c in first.requested_tool_calls] == ["lookup_order"]
    assert second.output == "A-1 has shipped."
    assert evaluator.stats.problems == {"event field": 2}


def test_a_long_run_holds_and_writes_each_message_once(evaluator: OnlineEvaluator) -> None:
    # each model call is sent the whole conversation again; held as it came, a long run's
    # memory and its capture line grew with the square of its length
    received: list[list[tuple[str, str]]] = []

    def read_page(page: int) -> str:
        """Read a page of the manual."""
        return f"page {page}: " + "the pump primes in three strokes. " * 40

    def reply(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        received.append([(str(m.role.value), m.content or "") for m in messages])
        turn = len(received)
        if turn > 4:
            return ChatMessage(role=MessageRole.ASSISTANT, content="It primes in three strokes.")
        block = ToolCallBlock(
            tool_call_id=f"p{turn}", tool_name="read_page", tool_kwargs={"page": turn}
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    agent = FunctionAgent(
        tools=[FunctionTool.from_defaults(fn=read_page)],
        llm=MockFunctionCallingLLM(response_generator=reply),
    )
    instrumentation = instrument(evaluator)
    try:

        async def run() -> str:
            return str(await agent.run("How does the pump prime?"))

        assert asyncio.run(run()) == "It primes in three strokes."
        [trace] = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    calls = trace.spans_of(SpanKind.LLM)
    assert [[(m["role"], m["content"]) for m in call.input] for call in calls] == received
    assert len(calls) == 5
    assert calls[4].input[0] is calls[1].input[0]  # held once
    line = json.loads(trace.to_json())
    written = json.dumps([s["input"] for s in line["spans"] if s["kind"] == "llm"])
    for page in range(1, 5):
        assert written.count(json.dumps(read_page(page))) == 1  # written once
