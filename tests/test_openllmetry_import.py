"""Spans written by OpenLLMetry's LangChain instrumentor (Traceloop's
opentelemetry-instrumentation-langchain, which writes the GenAI conventions) around a real
agent loop import to the trace agenteval's own handler captures of the same run, and score
the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from agenteval_otel import import_otlp
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from test_openinference_import import view

from agenteval_core import RunStatus, SpanKind, Trace, read_capture
from agenteval_core.metrics import Coherence, ToolFailures

_RUN = """
import json, sys
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from agenteval_core import OnlineEvaluator
from agenteval_langchain import AgentEvalCallbackHandler
from test_openllmetry_import import lookup_agent

orders, spans, capture = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
with open(spans, "w", encoding="utf-8") as out:
    provider = TracerProvider()
    exporter = ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\\n")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    LangchainInstrumentor().instrument(tracer_provider=provider)
    agent = lookup_agent(orders)  # made under the instrumentor, as an application makes it
    with OnlineEvaluator(capture=capture, log=False) as evaluator:
        try:
            agent.invoke(
                {"messages": [("user", "Where is A-1?")]},
                config={"callbacks": [AgentEvalCallbackHandler(evaluator)]},
            )
        except ValueError:
            pass
    provider.shutdown()
"""


def lookup_agent(orders: list[str]) -> Any:
    """``create_agent`` with a lookup that raises for B-2 (nothing catches it, so the run
    fails) and answers for the others; its model asks for each of ``orders`` in turn, then
    answers "A-1 has shipped."."""

    @tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        if order_id == "B-2":
            raise ValueError("no order B-2")
        return f"{order_id} shipped"

    asks = [
        AIMessage("", tool_calls=[tool_call("lookup", f"c{n}", order_id=order)])
        for n, order in enumerate(orders, start=1)
    ]
    return create_agent(ScriptedChatModel(replies=[*asks, AIMessage("A-1 has shipped.")]), [lookup])


def both_ways(orders: list[str], tmp_path: Path) -> tuple[Trace, list[Trace]]:
    """One run of the agent under agenteval's handler and OpenLLMetry's at once, in a
    process of its own (OpenLLMetry's handler outlives its uninstrument(), and would write
    every later test's runs): (agenteval's capture, the import of OpenLLMetry's spans)."""
    spans, capture = tmp_path / "openllmetry.jsonl", tmp_path / "ours.jsonl"
    environment = {**os.environ, "TRACELOOP_TRACE_CONTENT": "true"}  # its default, said
    environment.pop("OTEL_SDK_DISABLED", None)  # conftest turns the SDK off
    environment["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), *sys.path])
    subprocess.run(
        [sys.executable, "-c", _RUN, json.dumps(orders), str(spans), str(capture)],
        env=environment,
        check=True,
        timeout=120,
    )
    [ours] = read_capture(capture)
    return ours, import_otlp(spans)


IDS = {"latency_ms", "trace_id", "case_id"}  # a result's own: the traces' ids differ
A1 = {
    "id": "c1",
    "name": "lookup",
    "arguments": {"order_id": "A-1"},
    "result": "A-1 shipped",
    "error": None,
}


@pytest.mark.parametrize(
    ("orders", "status", "answer"),
    [(["A-1"], RunStatus.OK, "A-1 has shipped."), (["A-1", "B-2"], RunStatus.ERROR, None)],
)
def test_an_openllmetry_run_imports_as_the_handler_captures_it(
    orders: list[str],
    status: RunStatus,
    answer: str | None,
    tmp_path: Path,
) -> None:
    # OpenLLMetry writes making the agent as a trace of its own (create_agent): it was one
    # more trace, "ok" with no input, that every metric passed; the run's request was its
    # GenAI message object, its answer missing (coherence assumed 1.0), and each tool
    # call's arguments LangChain's callback keywords ({"color": "green", ...}) with the
    # callback's payload as the result
    ours, imported = both_ways(orders, tmp_path)
    [theirs] = imported
    want, got = view(ours), view(theirs)
    # OpenLLMetry has an agent span for the graph under its invoke_agent root, and a model
    # call that only asks for tools answers None where the handler records ""
    steps = [SpanKind.LLM, SpanKind.TOOL] * len(orders)
    finished = [SpanKind.LLM] if status is RunStatus.OK else []
    assert want.pop("kinds") == [SpanKind.AGENT, *steps, *finished]
    assert got.pop("kinds") == [SpanKind.AGENT, SpanKind.AGENT, *steps, *finished]
    answered = [answer] if status is RunStatus.OK else []
    assert [call[0] for call in got.pop("model_calls")] == [None] * len(orders) + answered
    assert [call[0] for call in want.pop("model_calls")] == [""] * len(orders) + answered
    assert got == want
    assert (theirs.input, theirs.output, theirs.status) == ("Where is A-1?", answer, status)
    failed = {
        "id": "c2",
        "name": "lookup",
        "arguments": {"order_id": "B-2"},
        "result": None,
        "error": "ValueError: no order B-2",
    }
    assert [c.model_dump() for c in theirs.tool_calls()] == [A1, failed][: len(orders)]
    for metric in (ToolFailures(), Coherence()):
        assert metric.measure(theirs).model_dump(exclude=IDS) == metric.measure(ours).model_dump(
            exclude=IDS
        )
