"""Reading the tool calls a ReAct-style model asks for in its text ("Thought / Action /
Action Input"), for the adapters of frameworks whose agents work that way."""

from __future__ import annotations

import json
import re
from typing import Any

from ..schema._trace import ToolCall
from ..schema._values import plain

__all__ = ["json_arguments", "react_actions"]

_ACTION = re.compile(
    r"Action:\s*(?P<name>[^\n]+?)\s*\nAction Input:\s*(?P<args>\{.*?\})\s*(?:\n|$)", re.DOTALL
)


def json_arguments(value: Any) -> dict[str, Any]:
    """Tool arguments as a JSON-safe dict (see :func:`~agenteval_core.plain`): a dict as it
    is, a JSON object's text parsed, anything else as ``{"input": value}``."""
    if isinstance(value, dict):
        return plain(value)
    try:
        parsed = json.loads(value) if isinstance(value, str) else None
    except (ValueError, RecursionError):
        parsed = None
    return plain(parsed if isinstance(parsed, dict) else {"input": value})


def react_actions(text: str, *, call_ids: str | None = None) -> tuple[str | None, list[ToolCall]]:
    """The thought and the tool calls a ReAct reply asks for (none: ``(None, [])``). With
    ``call_ids``, the calls get ids ``<call_ids>#<n>`` in order."""
    calls = [
        ToolCall(
            id=f"{call_ids}#{n}" if call_ids is not None else None,
            name=match["name"].strip(),
            arguments=json_arguments(match["args"]),
        )
        for n, match in enumerate(_ACTION.finditer(text))
    ]
    if not calls:
        return None, []
    return text.split("\nAction:")[0].strip().removeprefix("Thought:").strip(), calls
