"""Cost per LangChain callback event on the agent's thread, and loop-alert latency.

Runs one scripted LangGraph agent (create_react_agent, two tool calls) with: no handler, a
no-op handler, agenteval's handler with online scoring on, and OpenInference's LangChain
instrumentor exporting to an in-memory exporter (when installed). The four are interleaved,
one run of each per repetition in a shuffled order, so a busy moment of the machine falls on
all of them alike and the small no-op figure is stable. Prints µs per event over the
no-handler baseline (medians) and the ratios the goals name.

    python -m bench langchain_overhead [--quick]
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from agenteval_core import LoopAlert, OnlineEvaluator

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent


@tool
def lookup(order_id: str) -> str:
    """Order status."""
    return "shipped"


@tool
def refund(order_id: str) -> str:
    """Refund an order."""
    return "refunded"


def _agent() -> Any:
    script = [
        AIMessage(content="", tool_calls=[tool_call("lookup", "a", order_id="A-1")]),
        AIMessage(content="", tool_calls=[tool_call("refund", "b", order_id="A-1")]),
        AIMessage(content="Done."),
    ]
    return create_react_agent(ScriptedChatModel(replies=script), tools=[lookup, refund])


class _Counter(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events = 0

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("on_") and not name.startswith("on_llm_new"):
            counter = object.__getattribute__(self, "__dict__")

            def count(*args: Any, **kwargs: Any) -> None:
                counter["events"] += 1

            return count
        return object.__getattribute__(self, name)


class _NoOp(BaseCallbackHandler):
    """Receives every event and does nothing."""


def _one_run(agent: Any, callbacks: list[Any]) -> tuple[float, float]:
    """(wall, agent-thread CPU) seconds of one run.

    CPU time of the agent's own thread is what the callbacks cost the agent; wall time also
    includes the background threads competing for the GIL while this scripted agent, unlike
    a real one waiting on a model, never releases it.
    """
    wall, cpu = time.perf_counter(), time.thread_time()
    agent.invoke({"messages": [("user", "go")]}, config={"callbacks": callbacks})
    return time.perf_counter() - wall, time.thread_time() - cpu


class _OpenInference:
    """OpenInference's LangChain instrumentor with an in-memory exporter, switched on only
    around its own runs (it patches LangChain's callback manager process-wide)."""

    def __init__(self) -> None:
        from openinference.instrumentation.langchain import LangChainInstrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.instrumentor = LangChainInstrumentor()

    def run(self, agent: Any) -> tuple[float, float]:
        self.instrumentor.instrument(tracer_provider=self.provider)
        try:
            return _one_run(agent, [])
        finally:
            self.instrumentor.uninstrument()
            self.exporter.clear()


def _interleaved(
    configurations: dict[str, Callable[[], tuple[float, float]]], runs: int
) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) per configuration over ``runs`` shuffled rounds, after warm-up."""
    order = list(configurations)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in order}
    shuffle = random.Random(7)
    for round_number in range(runs + 20):
        shuffle.shuffle(order)
        for name in order:
            measured = configurations[name]()
            if round_number >= 20:
                samples[name].append(measured)
    return {
        name: (
            statistics.median(wall for wall, _ in values),
            statistics.median(cpu for _, cpu in values),
        )
        for name, values in samples.items()
    }


def _alert_latency(directory: Path, loops: int) -> list[float]:
    latencies: list[float] = []

    def on_alert(alert: LoopAlert) -> None:
        if alert.call_started is not None:
            latencies.append((time.time() - alert.call_started) * 1000)

    looping = [
        AIMessage(content="", tool_calls=[tool_call("lookup", f"l{i}", order_id="A-9")])
        for i in range(3)
    ]
    with OnlineEvaluator(
        capture=directory / "alerts.jsonl", on_alert=on_alert, log=False
    ) as evaluator:
        handler = AgentEvalCallbackHandler(evaluator)
        for _ in range(loops):
            agent = create_react_agent(
                ScriptedChatModel(replies=[*looping, AIMessage(content="gave up")]), tools=[lookup]
            )
            agent.invoke({"messages": [("user", "loop")]}, config={"callbacks": [handler]})
            evaluator.flush(10)
    return latencies


def main(quick: bool = False) -> None:
    runs = 100 if quick else 400
    agent = _agent()
    counter = _Counter()
    agent.invoke({"messages": [("user", "go")]}, config={"callbacks": [counter]})
    events = counter.events
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        with OnlineEvaluator(capture=directory / "capture.jsonl", log=False) as evaluator:
            ours_handler = AgentEvalCallbackHandler(evaluator)
            configurations: dict[str, Callable[[], tuple[float, float]]] = {
                "baseline": lambda: _one_run(agent, []),
                "no-op": lambda: _one_run(agent, [_NoOp()]),
                "agenteval": lambda: _one_run(agent, [ours_handler]),
            }
            try:
                tracer = _OpenInference()
                configurations["openinference"] = lambda: tracer.run(agent)
            except ImportError:
                pass
            measured = _interleaved(configurations, runs)
            evaluator.flush(60)
            scored = evaluator.stats.scored
        latencies = _alert_latency(directory, 20 if quick else 100)
    baseline, noop, ours = measured["baseline"], measured["no-op"], measured["agenteval"]
    openinference = measured.get("openinference")

    def per_event(measured: tuple[float, float], which: int) -> float:
        return (measured[which] - baseline[which]) / events * 1e6

    print(
        f"agent run without handlers: {baseline[0] * 1e3:.2f} ms, {events} callback events per run"
    )
    rows = [("no-op handler", noop), ("agenteval handler (online scoring on)", ours)]
    if openinference is not None:
        rows.append(("OpenInference + in-memory exporter", openinference))
    for label, measured in rows:
        print(
            f"{label:40s} agent-thread CPU {per_event(measured, 1):7.2f} µs/event, "
            f"wall {per_event(measured, 0):7.2f} µs/event"
        )
    print(f"{scored} traces scored in the background")
    for which, label in ((1, "agent-thread CPU"), (0, "wall")):
        print(
            f"ratio agenteval / no-op ({label}): {per_event(ours, which) / per_event(noop, which):.2f}"
        )
        if openinference is not None:
            ratio = per_event(ours, which) / per_event(openinference, which)
            goal = 0.1 if which == 1 else 0.25
            print(f"ratio agenteval / OpenInference ({label}): {ratio:.3f} (goal <= {goal})")
    if openinference is None:
        print(
            "OpenInference LangChain instrumentor: not installed (pip install openinference-instrumentation-langchain opentelemetry-sdk)"
        )
    latencies.sort()
    p95 = latencies[int(0.95 * (len(latencies) - 1))]
    print(
        f"loop alert latency from the looping call's start: p50 {statistics.median(latencies):.2f} ms, "
        f"p95 {p95:.2f} ms over {len(latencies)} loops (goal p95 <= 50 ms)"
    )
