"""Add agenteval to a LlamaIndex agent: one call instruments the dispatcher.

Offline: the LLM replies from a script, the tools are real functions. Swap in your own LLM
(e.g. OpenAI) and nothing else changes.

    pip install -e '.[llamaindex]' && python examples/llamaindex_quickstart.py
"""

from __future__ import annotations

import asyncio

from agenteval_llamaindex import instrument
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from agenteval_core import ConsoleSink, OnlineEvaluator


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return {"Paris": "sunny, 21°C", "Oslo": "snow, -3°C"}.get(city, "unknown")


def scripted_llm(messages: list[ChatMessage], **_: object) -> ChatMessage:
    if not any(m.role == MessageRole.TOOL for m in messages):
        call = ToolCallBlock(
            tool_call_id="w1", tool_name="get_weather", tool_kwargs={"city": "Paris"}
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])
    return ChatMessage(role=MessageRole.ASSISTANT, content="It is sunny and 21°C in Paris.")


agent = FunctionAgent(
    tools=[FunctionTool.from_defaults(get_weather)],
    llm=MockFunctionCallingLLM(response_generator=scripted_llm),
)


async def main() -> None:
    with OnlineEvaluator(
        capture="llamaindex-capture.jsonl",
        sinks=[ConsoleSink()],  # a line per scored trace, and a summary at the end
    ) as evaluator:
        instrumentation = instrument(evaluator, session_id="user-42")  # the one line
        print(await agent.run("What's the weather in Paris?"))
        evaluator.flush(10)
        instrumentation.uninstrument()


if __name__ == "__main__":
    asyncio.run(main())
