"""Synthetic captures for the benchmarks: realistic sizes, deterministic content."""

from __future__ import annotations

import json
import random
from pathlib import Path

from agenteval_core import AgentStep, ToolCall, ToolSpec, Trace

__all__ = ["version_1_line", "write_capture"]

WORDS = (
    "order refund shipping invoice customer account password delivery status carrier parcel "
    "warehouse address payment card subscription plan upgrade cancel return label tracking"
).split()

TOOLS = [
    ToolSpec(
        name="lookup_order",
        description="Find an order.",
        parameters={
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    ),
    ToolSpec(
        name="search_kb",
        description="Search articles.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    ),
]


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def version_1_line(trace: Trace) -> str:
    """The line schema version 1 wrote for ``trace``: every tool call's arguments and result
    also on its span, and the results on the model's requests too."""
    data = trace.model_dump(mode="json")
    data["schema_version"] = 1
    done = {s["tool_call"]["id"]: s["tool_call"] for s in data["spans"] if s["tool_call"]}
    for span in data["spans"]:
        for asked in span["requested_tool_calls"]:
            if asked["id"] in done:
                asked["result"], asked["error"] = done[asked["id"]]["result"], None
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def write_capture(
    path: Path, count: int, *, session_length: int = 10, seed: int = 0, version: int = 2
) -> Path:
    """Write ``count`` traces of two tool calls each, ~200-character texts, 10 per session,
    as lines of schema ``version`` (1 or the current)."""
    rng = random.Random(seed)
    lines = []
    with open(path, "w", encoding="utf-8") as handle:
        for index in range(count):
            order = f"A-{rng.randrange(10_000)}"
            trace = Trace.from_steps(
                _sentence(rng, 12),
                [
                    AgentStep(
                        thought=_sentence(rng, 10),
                        tool_calls=[
                            ToolCall(
                                id=f"c{index}-1",
                                name="lookup_order",
                                arguments={"order_id": order},
                                result={"status": rng.choice(WORDS), "note": _sentence(rng, 20)},
                            )
                        ],
                    ),
                    AgentStep(
                        tool_calls=[
                            ToolCall(
                                id=f"c{index}-2",
                                name="search_kb",
                                arguments={"query": _sentence(rng, 4)},
                                result=_sentence(rng, 30),
                            )
                        ]
                    ),
                    AgentStep(output=_sentence(rng, 30)),
                ],
                tools=TOOLS,
                session_id=f"s{index // session_length}",
                id=f"t{index}",
            )
            lines.append(version_1_line(trace) if version == 1 else trace.to_json())
            if len(lines) == 1000:
                handle.write("\n".join(lines) + "\n")
                lines.clear()
        if lines:
            handle.write("\n".join(lines) + "\n")
    return path
