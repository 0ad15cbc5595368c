"""The LlamaIndex adapter, driven by real agent workflows with a scripted function-calling LLM."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from agenteval_llamaindex import LlamaIndexInstrumentation, instrument
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import TextBlock, ToolCallBlock
from llama_index.core.instrumentation.dispatcher import instrument_tags
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from agenteval_core import LoopAlert, OnlineEvaluator, RunStatus, SpanKind

ORDERS = {"A-1": "shipped", "A-2": "processing"}


def lookup_order(order_id: str) -> str:
    """Status of an order by id."""
    if order_id not in ORDERS:
        raise ValueError(f"no order {order_id}")
    return ORDERS[order_id]


def refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order."""
    return f"refunded {amount} on {order_id}"


TOOLS = [FunctionTool.from_defaults(lookup_order), FunctionTool.from_defaults(refund)]


def calls(*blocks: tuple[str, str, dict[str, Any]], text: str = "") -> ChatMessage:
    content: list[Any] = [TextBlock(text=text)] if text else []
    content += [ToolCallBlock(tool_call_id=i, tool_name=n, tool_kwargs=a) for i, n, a in blocks]
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=content)


def answer(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text)


def scripted(
    replies: Sequence[ChatMessage] | Callable[[Sequence[ChatMessage]], ChatMessage],
) -> MockFunctionCallingLLM:
    """An LLM that replies from a list (per run: counts its own tool results) or a function."""
    if callable(replies):
        return MockFunctionCallingLLM(response_generator=lambda messages, **_: replies(messages))

    def reply(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        done = sum(1 for m in messages if m.role == MessageRole.TOOL)
        return replies[min(done, len(replies) - 1)]

    return MockFunctionCallingLLM(response_generator=reply)


@pytest.fixture
def evaluator(tmp_path: Path) -> Iterator[Any]:
    alerts: list[LoopAlert] = []
    ev = OnlineEvaluator(capture=tmp_path / "capture.jsonl", on_alert=alerts.append)
    ev.alerts = alerts  # type: ignore[attr-defined]
    yield ev
    ev.close()


@pytest.fixture
def instrumented(evaluator: OnlineEvaluator) -> Iterator[LlamaIndexInstrumentation]:
    instrumentation = instrument(evaluator)
    yield instrumentation
    instrumentation.uninstrument()


def test_function_agent_run_becomes_a_trace(
    instrumented: LlamaIndexInstrumentation, evaluator: OnlineEvaluator
) -> None:
    llm = scripted(
        [
            calls(("c1", "lookup_order", {"order_id": "A-1"}), text="Looking it up."),
            calls(("c2", "refund", {"order_id": "A-1", "amount": 5.0})),
            answer("A-1 shipped; refunded 5.0."),
        ]
    )
    agent = FunctionAgent(tools=TOOLS, llm=llm)

    async def main() -> str:
        with instrument_tags({"session_id": "tagged-session"}):
            return str(await agent.run("Where is A-1? Refund 5."))

    assert asyncio.run(main()) == "A-1 shipped; refunded 5.0."
    [trace] = evaluator.captured()
    assert trace.framework == "llamaindex" and trace.session_id == "tagged-session"
    assert trace.input == "Where is A-1? Refund 5." and trace.output == "A-1 shipped; refunded 5.0."
    root = trace.spans[0]
    assert root.kind is SpanKind.AGENT and root.name == "FunctionAgent.run"
    ids = {span.id for span in trace.spans}
    assert all(span.parent_id in ids for span in trace.spans[1:])
    assert [(c.id, c.name, c.arguments, c.result) for c in trace.tool_calls()] == [
        ("c1", "lookup_order", {"order_id": "A-1"}, "shipped"),
        ("c2", "refund", {"order_id": "A-1", "amount": 5.0}, "refunded 5.0 on A-1"),
    ]
    llms = trace.spans_of(SpanKind.LLM)
    assert len(llms) == 3 and [c.id for c in llms[0].requested_tool_calls] == ["c1"]
    assert llms[0].thought == "Looking it up."
    assert {t.name for t in trace.tools} == {"lookup_order", "refund"}
    schema = next(t for t in trace.tools if t.name == "refund").parameters
    assert schema is not None and set(schema["required"]) == {"order_id", "amount"}


def test_tool_error_and_run_error_are_captured(
    instrumented: LlamaIndexInstrumentation, evaluator: OnlineEvaluator
) -> None:
    failing = FunctionAgent(
        tools=TOOLS,
        llm=scripted(
            [calls(("bad", "lookup_order", {"order_id": "Z-9"})), answer("No such order.")]
        ),
    )
    endless = FunctionAgent(
        tools=TOOLS, llm=scripted([calls(("x", "lookup_order", {"order_id": "A-1"}))])
    )

    async def main() -> None:
        assert str(await failing.run("Where is Z-9?")) == "No such order."
        with pytest.raises(Exception, match="Max iterations"):
            await endless.run("Loop forever", max_iterations=2)

    asyncio.run(main())
    first, second = evaluator.captured()
    [call] = first.tool_calls()
    assert call.failed and call.error == "ValueError: no order Z-9"
    assert second.error is not None and "Max iterations" in second.error
    assert second.output is None
    # an iteration limit is a limit, not a crash (it was: status error)
    assert (first.status, second.status) == (RunStatus.OK, RunStatus.LIMIT)
    assert second.status_reason == second.error


def test_react_agent_and_agent_workflow(
    instrumented: LlamaIndexInstrumentation, evaluator: OnlineEvaluator
) -> None:
    def react(messages: Sequence[ChatMessage]) -> ChatMessage:
        seen_observation = any(
            m.role != MessageRole.SYSTEM and "Observation" in str(m.content) for m in messages
        )
        if not seen_observation:
            action = {"order_id": "A-2"}
            return answer(
                f"Thought: I need the status.\nAction: lookup_order\nAction Input: {json.dumps(action)}"
            )
        return answer("Thought: I can answer.\nAnswer: A-2 is processing.")

    react_agent = ReActAgent(tools=TOOLS, llm=scripted(react))
    workflow = AgentWorkflow(
        agents=[
            FunctionAgent(
                name="support",
                description="support",
                tools=TOOLS,
                llm=scripted(
                    [calls(("w1", "lookup_order", {"order_id": "A-1"})), answer("A-1 shipped.")]
                ),
            )
        ],
        root_agent="support",
    )

    async def main() -> None:
        assert "A-2 is processing" in str(await react_agent.run("Status of A-2?"))
        assert str(await workflow.run("Status of A-1?")) == "A-1 shipped."

    asyncio.run(main())
    react_trace, workflow_trace = evaluator.captured()
    [react_call] = react_trace.tool_calls()
    assert react_call.name == "lookup_order" and react_call.arguments == {"order_id": "A-2"}
    assert react_call.result == "processing" and react_call.id  # ReAct ids are agent-made
    assert react_trace.spans[0].name == "ReActAgent.run"
    assert workflow_trace.spans[0].name == "AgentWorkflow.run"
    assert [c.id for c in workflow_trace.tool_calls()] == ["w1"]


def test_concurrent_runs_do_not_mix(
    instrumented: LlamaIndexInstrumentation, evaluator: OnlineEvaluator
) -> None:
    def reply_for(messages: Sequence[ChatMessage]) -> ChatMessage:
        order = str(
            messages[-1].content
            if messages[-1].role == MessageRole.USER
            else next(m.content for m in messages if m.role == MessageRole.USER)
        ).split()[-1]
        if not any(m.role == MessageRole.TOOL for m in messages):
            return calls((f"id-{order}", "lookup_order", {"order_id": order}))
        return answer(f"answer for {order}")

    agent = FunctionAgent(tools=TOOLS, llm=scripted(reply_for))

    async def main() -> None:
        await asyncio.gather(*(agent.run(f"status of {o}") for o in ["A-1", "A-2"] * 5))

    asyncio.run(main())
    traces = evaluator.captured()
    assert len(traces) == 10
    for trace in traces:
        order = str(trace.input).split()[-1]
        [call] = trace.tool_calls()
        assert call.id == f"id-{order}" and trace.output == f"answer for {order}"


def test_loop_alert_and_guard(evaluator: OnlineEvaluator) -> None:
    instrumentation = instrument(evaluator, stop_on_loop=True)
    try:
        normal = FunctionAgent(
            tools=TOOLS,
            llm=scripted([calls(("n1", "lookup_order", {"order_id": "A-1"})), answer("shipped")]),
        )
        looping = FunctionAgent(
            tools=TOOLS, llm=scripted([calls(("l", "lookup_order", {"order_id": "A-2"}))])
        )

        async def main() -> None:
            await normal.run("normal")
            assert evaluator.flush(10)
            assert evaluator.alerts == []  # type: ignore[attr-defined]
            run = instrumentation.guard(looping.run("loop", max_iterations=50))
            with pytest.raises(BaseException) as stopped:
                await run
            assert (
                "cancel" in type(stopped.value).__name__.lower()
                or "cancel" in str(stopped.value).lower()
            )

        asyncio.run(main())
        traces = evaluator.captured()
        alerts = evaluator.alerts  # type: ignore[attr-defined]
        assert [a.pattern for a in alerts] == ["repeated_call"]
        looped = traces[-1]
        assert alerts[0].trace_id == looped.id
        assert 3 <= len(looped.tool_calls()) < 10  # stopped long before max_iterations
    finally:
        instrumentation.uninstrument()
