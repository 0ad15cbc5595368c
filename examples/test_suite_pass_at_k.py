"""Run an agent k times per case and report pass@k / pass^k with credible intervals.

Offline: the "agent" below is a small deterministic stand-in with real tools that sometimes
routes to the wrong tool, the way a sampled LLM agent does. Replace ``run_agent`` with your own
agent (returning its final answer, a Trace, or an EvalCase).

    python examples/test_suite_pass_at_k.py
"""

from __future__ import annotations

import random

from agenteval_core import AgentStep, EvalCase, EvalSuite, ToolCall, ToolSpec, Trace
from agenteval_core.metrics import ParameterCorrectness, ToolCallAccuracy

ORDERS = {"A-1": "shipped", "A-2": "processing"}


def lookup_order(order_id: str) -> str:
    return ORDERS.get(order_id, "unknown order")


def search_kb(query: str) -> str:
    return f"3 articles about {query}"


TOOLS = [
    ToolSpec(
        name="lookup_order",
        description="Status of an order.",
        parameters={
            "type": "object",
            "properties": {"order_id": {"type": "string", "pattern": "^A-[0-9]+$"}},
            "required": ["order_id"],
        },
    ),
    ToolSpec(
        name="search_kb",
        description="Search help articles.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    ),
]

rng = random.Random(7)


def run_agent(question: str) -> Trace:
    """Picks the right tool 80% of the time and answers from the tool's result."""
    order_id = question.split()[-1].rstrip("?")
    if rng.random() < 0.8:
        call = ToolCall(
            name="lookup_order", arguments={"order_id": order_id}, result=lookup_order(order_id)
        )
    else:
        call = ToolCall(name="search_kb", arguments={"query": question}, result=search_kb(question))
    return Trace.from_steps(
        question,
        [
            AgentStep(thought="Use a tool.", tool_calls=[call]),
            AgentStep(output=f"Status: {call.result}"),
        ],
        tools=TOOLS,
    )


cases = [
    EvalCase(input=f"Where is order {order_id}?", expected_tool_calls=["lookup_order"], id=order_id)
    for order_id in ORDERS
]

suite = (
    EvalSuite("order status")
    .add_cases(cases)
    .add_evaluators(ToolCallAccuracy(threshold=1.0), ParameterCorrectness())
)

if __name__ == "__main__":
    report = suite.run(run_agent, k=3, attempts=10, estimator="unbiased")
    print(report.summary())
