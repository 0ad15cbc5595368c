"""LlamaIndex agents that wait for a human, which the adapter and import tests share: a tool
that waits in ``ctx.wait_for_event`` and a workflow whose step asks with an
``InputRequiredEvent``, and how an app pauses one to resume it later."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import (
    Context,
    HumanResponseEvent,
    InputRequiredEvent,
    StartEvent,
    StopEvent,
    Workflow,
    step,
)
from workflows.errors import WorkflowCancelledByUser


async def refund_once_approved(ctx: Context, order_id: str) -> str:
    """Refund an order once a human approves."""
    approval = await ctx.wait_for_event(
        HumanResponseEvent,
        waiter_id=f"approve-{order_id}",
        waiter_event=InputRequiredEvent(prefix=f"Refund {order_id}?"),
    )
    return "refunded" if approval.response == "yes" else "not approved"


# LlamaIndex passes ``ctx`` to a tool whose annotation is the Context class itself; this
# module's annotations are strings (``from __future__ import annotations``)
refund_once_approved.__annotations__["ctx"] = Context


def refund_agent() -> FunctionAgent:
    """An agent that refunds the order its request names (A-1 to A-9) through
    ``refund_once_approved``, which waits for a human's approval, then answers."""

    def reply(messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role == MessageRole.TOOL for m in messages):
            return ChatMessage(role=MessageRole.ASSISTANT, content="Refunded.")
        order = re.findall(r"A-\d", str(messages[-1].content or ""))[0]
        block = ToolCallBlock(
            tool_call_id="c1", tool_name="refund_once_approved", tool_kwargs={"order_id": order}
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])

    return FunctionAgent(
        tools=[FunctionTool.from_defaults(async_fn=refund_once_approved)],
        llm=MockFunctionCallingLLM(response_generator=reply),
    )


class ApproveRefund(Workflow):
    """LlamaIndex's human-in-the-loop as a workflow of steps: one asks (returns an
    ``InputRequiredEvent``), the workflow idles, and another takes the answer."""

    @step
    async def ask(self, ev: StartEvent) -> InputRequiredEvent:
        return InputRequiredEvent(prefix=f"Refund {ev.order}?")

    @step
    async def act(self, ev: HumanResponseEvent) -> StopEvent:
        return StopEvent(result="Refunded." if ev.response == "yes" else "Not refunded.")


async def saved_when_it_asks(handler: Any) -> dict[str, Any]:
    """The context of a run stopped when it asks a human, as an app keeps it to resume the
    run once the human answers."""
    saved: dict[str, Any] | None = None
    async for event in handler.stream_events():
        if isinstance(event, InputRequiredEvent):
            saved = handler.ctx.to_dict()
            await handler.cancel_run()
            break
    try:
        await handler
    except WorkflowCancelledByUser:
        if saved is not None:
            return saved
    raise AssertionError("the run did not stop when it asked a human")


async def resume(workflow: Any, saved: dict[str, Any], answer: str = "yes") -> str:
    """Resume a run from its saved context with the human's answer; its answer."""
    handler = workflow.run(ctx=Context.from_dict(workflow, saved))
    handler.ctx.send_event(HumanResponseEvent(response=answer))
    return str(await handler)


async def answered_at_once(handler: Any, answer: str = "yes") -> str:
    """A run whose human answers as soon as it asks; its answer."""
    async for event in handler.stream_events():
        if isinstance(event, InputRequiredEvent):
            handler.ctx.send_event(HumanResponseEvent(response=answer))
    return str(await handler)
