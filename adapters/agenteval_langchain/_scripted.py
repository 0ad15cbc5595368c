"""A chat model that replies from a script: for tests, demos and offline examples."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
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
        if self._lock is None:
            object.__setattr__(self, "_lock", threading.Lock())
        with self._lock:
            index = self.calls
            object.__setattr__(self, "calls", index + 1)
        if self.reply is not None:
            message = self.reply(messages)
        else:
            message = self.replies[index % len(self.replies)]
        return ChatResult(generations=[ChatGeneration(message=message.model_copy())])
