"""A CrewAI LLM that replies from a script: for tests, demos and offline examples.

A custom ``BaseLLM`` emits no LLM events by itself; this one emits the started and completed
events inside ``llm_call_context()`` as CrewAI's own LLMs do, with token usage.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from crewai.llms.base_llm import BaseLLM, LLMCallType, llm_call_context
from pydantic import Field, PrivateAttr

__all__ = ["ScriptedLLM", "native_call"]


class ScriptedLLM(BaseLLM):
    """Replies with the next of ``replies`` (the last one repeats), or ``reply(messages)``.

    Text replies follow CrewAI's ReAct format (``Thought: ...\\nAction: tool\\nAction Input:
    {...}`` or ``Final Answer: ...``). With ``native=True`` the LLM says it supports function
    calling, as OpenAI's and Anthropic's models do, and a reply may be a list of tool calls
    (see :func:`native_call`) that CrewAI executes.
    """

    replies: list[str | list[dict[str, Any]]] = Field(default_factory=list)
    reply: Callable[[Any], str | list[dict[str, Any]]] | None = None
    native: bool = False
    _index: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def _extract_provider(cls, model: str) -> str:
        return "scripted"  # what CrewAI would guess from the model name is "openai"

    def call(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> str | list[dict[str, Any]]:
        with llm_call_context():
            self._emit_call_started_event(
                messages=messages, tools=tools, from_task=from_task, from_agent=from_agent
            )
            if self.reply is not None:
                text = self.reply(messages)
            else:
                with self._lock:
                    index, self._index = self._index, self._index + 1
                text = self.replies[min(index, len(self.replies) - 1)]
            usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            self._track_token_usage_internal(usage)
            self._emit_call_completed_event(
                response=text,
                call_type=LLMCallType.LLM_CALL,
                from_task=from_task,
                from_agent=from_agent,
                messages=messages,
                usage=usage,
            )
            return text

    def supports_function_calling(self) -> bool:
        return self.native


def native_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """One tool call of a function-calling reply, as OpenAI's API returns it."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
