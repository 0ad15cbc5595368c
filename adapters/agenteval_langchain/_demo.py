"""``agenteval demo``: a scripted LangGraph support agent scored live, then caught looping.

Offline and deterministic: the chat model replies from a script, the tools are real Python
functions. Takes a few seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from rich.console import Console

from agenteval_core import LoopAlert, OnlineEvaluator, Trace, TraceResults

from ._handler import AgentEvalCallbackHandler, AgentLoopError
from ._scripted import ScriptedChatModel, tool_call

__all__ = ["run_demo"]

ORDERS = {"A-1042": "shipped with DHL, arriving Friday", "A-2001": "processing"}


@tool
def lookup_order(order_id: str) -> str:
    """Find an order by id and return its status."""
    return ORDERS.get(order_id, "unknown order")


@tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund part or all of an order."""
    return f"refund of {amount:.2f} EUR issued for order {order_id}"


def _support_agent(messages: Sequence[BaseMessage]) -> AIMessage:
    """The scripted model: one tool call per question, then an answer from the result.
    Asked about order A-2001 it gets stuck re-checking the same order."""
    last_question = max(i for i, m in enumerate(messages) if m.type == "human")
    question = str(messages[last_question].content)
    results = [m for m in messages[last_question + 1 :] if isinstance(m, ToolMessage)]
    if "A-2001" in question:
        return AIMessage(
            content="Let me check that order again.",
            tool_calls=[tool_call("lookup_order", f"check-{len(results)}", order_id="A-2001")],
        )
    if "refund" in question.lower():
        if not results:
            return AIMessage(
                content="I will refund the late delivery.",
                tool_calls=[tool_call("issue_refund", "refund-1", order_id="A-1042", amount=15.0)],
            )
        return AIMessage(content=f"Done: {results[-1].content}.")
    if not results:
        return AIMessage(
            content="Let me look that order up.",
            tool_calls=[tool_call("lookup_order", f"lookup-{last_question}", order_id="A-1042")],
        )
    if "arrive" in question:
        return AIMessage(content="Order A-1042 should arrive on Friday; it is with DHL.")
    return AIMessage(content=f"Your order A-1042 has {results[-1].content}.")


TURNS = [
    "Where is my order A-1042?",
    "Can I get a refund of 15 euros on order A-1042? It arrived late.",
    "Thanks! When will order A-1042 arrive?",
    "Is my second order A-2001 ready yet?",
]


def run_demo(capture: Path, console: Console | None = None) -> OnlineEvaluator:
    """Run the demo session, printing live scores and the loop alert; returns the evaluator."""
    console = console or Console()
    started: dict[str, float] = {}

    def show_scores(trace: Trace, outcome: TraceResults) -> None:
        parts = [
            f"{r.name} [{'green' if r.success else 'red'}]{r.score:.2f}[/]"
            for r in outcome.results
            if r.score is not None
        ]
        console.print(f"  scored in the background: {', '.join(parts)}")
        if trace.status is not None and trace.status != "ok":
            skipped = [r.name for r in outcome.results if r.skipped]
            console.print(
                f"  [bold red]run {trace.status}[/]: {trace.status_reason}"
                + (f"; not scored: {', '.join(skipped)}" if skipped else "")
            )
        session = {r.name: r.score for r in outcome.session_results if r.score is not None}
        if session:
            console.print(
                "  session so far: "
                + ", ".join(f"{name} {score:.2f}" for name, score in session.items())
            )

    def show_alert(alert: LoopAlert) -> None:
        lag = (time.perf_counter() - started.get("turn", time.perf_counter())) * 1000
        console.print(
            f"  [bold red]LOOP ALERT[/] ({alert.pattern}): {alert.message} "
            f"[dim]{lag:.0f} ms into the turn[/]"
        )

    # LangChain logs the guard's deliberate exception as a callback error; the demo shows
    # the alert itself instead.
    logging.getLogger("langchain_core.callbacks.manager").setLevel(logging.CRITICAL)
    evaluator = OnlineEvaluator(
        capture=capture, on_result=show_scores, on_alert=show_alert, log=False
    )
    handler = AgentEvalCallbackHandler(evaluator, session_id="demo-session", stop_on_loop=True)
    agent = create_agent(
        ScriptedChatModel(reply=_support_agent), tools=[lookup_order, issue_refund]
    )
    console.print("[bold]agenteval demo[/]: a support agent with one callback handler added\n")
    for number, question in enumerate(TURNS, start=1):
        console.print(f"[bold cyan]turn {number}[/] user: {question}")
        started["turn"] = time.perf_counter()
        try:
            request: Any = {"messages": [("user", question)]}
            config: RunnableConfig = {"callbacks": [handler]}
            state = agent.invoke(request, config=config)
            console.print(f"  agent: {state['messages'][-1].content}")
        except AgentLoopError as stop:
            console.print(f"  [bold red]guard stopped the run[/]: {stop}")
        evaluator.flush(10)
    evaluator.flush(10)
    console.print(
        f"\n{evaluator.stats.captured} traces captured to {capture}; "
        f"{evaluator.stats.alerts} alert(s). Replay them offline with:\n"
        f"  agenteval replay {capture}"
    )
    return evaluator
