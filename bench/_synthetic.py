"""Synthetic captures for the benchmarks: realistic sizes, deterministic content."""

from __future__ import annotations

import random
from pathlib import Path

from agenteval_core import AgentStep, ToolCall, ToolSpec, Trace

__all__ = ["write_capture"]

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


def write_capture(path: Path, count: int, *, session_length: int = 10, seed: int = 0) -> Path:
    """Write ``count`` traces of two tool calls each, ~200-character texts, 10 per session."""
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
            lines.append(trace.model_dump_json())
            if len(lines) == 1000:
                handle.write("\n".join(lines) + "\n")
                lines.clear()
        if lines:
            handle.write("\n".join(lines) + "\n")
    return path
