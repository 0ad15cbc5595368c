"""A chat model that replies from a script: for tests, demos and offline examples."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

__all__ = ["ScriptedChatModel", "tool_call"]


def tool_call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    """One tool call for an ``AIMessage(tool_calls=[...])``."""
    return {"name": name, "args": arguments, "id": call_id, "type": "tool_call"}


class ScriptedChatModel(BaseChatModel):
    """Replies with the next message of ``replies`` on each call (cycling), or with what
    ``reply(messages)`` returns. Supports ``bind_tools`` like a real chat model, so the
    bound tools' JSON schemas reach the callbacks."""

    replies: list[AIMessage] = Field(default_factory=list)
    reply: Callable[[Sequence[BaseMessage]], AIMessage] | None = None
    model_name: str = "scripted-model"
    calls: int = 0
    _lock: Any = None

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def bind_tools(  # type: ignore[override]
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[Any, BaseMessage]:
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """The same reply, word by word (content blocks: block by block, as Anthropic's
        models stream them), then its tool calls, metadata and extra fields (a reasoning
        model's ``reasoning_content``), as a streaming model sends them."""
        message = self._next(messages)
        if isinstance(message.content, list):
            for index, block in enumerate(message.content):
                part = {**block, "index": index} if isinstance(block, dict) else block
                yield ChatGenerationChunk(message=AIMessageChunk(content=[part]))
        else:
            for n, word in enumerate(message.content.split(" ")):
                chunk = ChatGenerationChunk(
                    message=AIMessageChunk(content=word if n == 0 else f" {word}")
                )
                yield chunk
        calls = [
            tool_call_chunk(name=c["name"], args=json.dumps(c["args"]), id=c["id"], index=i)
            for i, c in enumerate(message.tool_calls)
        ]
        if (
            calls
            or message.usage_metadata
            or message.response_metadata
            or message.additional_kwargs
        ):
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=calls,
                    usage_metadata=message.usage_metadata,
                    response_metadata=message.response_metadata,
                    additional_kwargs=message.additional_kwargs,
                )
            )

    def _next(self, messages: Sequence[BaseMessage]) -> AIMessage:
        if self._lock is None:
            object.__setattr__(self, "_lock", threading.Lock())
        with self._lock:
            index = self.calls
            object.__setattr__(self, "calls", index + 1)
        if self.reply is not None:
            return self.reply(messages).model_copy()
        return self.replies[index % len(self.replies)].model_copy()
