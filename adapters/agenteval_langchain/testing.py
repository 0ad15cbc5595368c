"""Offline stand-ins for testing an agent with agenteval: a chat model that replies from a
script (it supports ``bind_tools`` like a real one), and a helper for its tool calls.

    from agenteval_langchain.testing import ScriptedChatModel, tool_call
"""

from __future__ import annotations

from ._scripted import ScriptedChatModel, tool_call

__all__ = ["ScriptedChatModel", "tool_call"]
