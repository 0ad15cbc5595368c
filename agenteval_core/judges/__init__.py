"""LLM judges: the protocol, an OpenAI-compatible HTTP judge and a LangChain chat-model judge."""

from __future__ import annotations

from ._protocol import Judge, JudgeReply, JudgeRequest

__all__ = ["Judge", "JudgeReply", "JudgeRequest"]
