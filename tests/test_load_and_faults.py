"""Nothing lost under odd data and failing resources: hostile values, full disks, forks,
rotated captures, crashed writers, read-only directories."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain._scripted import ScriptedChatModel, tool_call
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool

from agenteval_core import OnlineEvaluator, Span, SpanKind, Trace, plain, read_capture

# --- hostile values ------------------------------------------------------------------------


def _self_containing() -> list[Any]:
    loop: list[Any] = []
    loop.extend([loop, loop, loop])
    return loop


def _shared_dag(depth: int) -> list[Any]:
    node: list[Any] = ["leaf"]
    for _ in range(depth):
        node = [node, node, node]  # 3**depth paths to the leaf, depth + 1 objects
    return node


def _run_tool_returning(
    content: Any, tmp_path: Path, *, artifact: Any = None, **arguments: Any
) -> tuple[list[Trace], Any]:
    """One real LangGraph run whose only tool returns ``content`` (and ``artifact`` beside
    it) when the model calls it with ``arguments`` (default ``key="k1"``); the captured
    traces and the evaluator's stats once everything is flushed."""

    @tool(response_format="content_and_artifact")
    def fetch(key: str, count: int = 0) -> tuple[Any, Any]:
        """Fetch a record."""
        return content, artifact

    asked = arguments or {"key": "k1"}

    def reply(messages: Sequence[BaseMessage]) -> AIMessage:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage(content="", tool_calls=[tool_call("fetch", "call-1", **asked)])
        return AIMessage(content="fetched")

    agent = create_agent(ScriptedChatModel(reply=reply), tools=[fetch])
    with OnlineEvaluator(
        capture=tmp_path / "c.jsonl", metrics=["tool_failures"], session_metrics=[]
    ) as ev:
        agent.invoke(
            {"messages": [("user", "fetch k1")]},
            config={"callbacks": [AgentEvalCallbackHandler(ev)]},
        )
        assert ev.flush(30)
        stats = ev.stats
    return list(read_capture(tmp_path / "c.jsonl")), stats


CYCLE = "[cycle: a value that contains itself]"


def test_a_tool_result_that_contains_itself_is_captured_with_cycle_markers(
    tmp_path: Path,
) -> None:
    traces, stats = _run_tool_returning("page 1", tmp_path, artifact=_self_containing())
    assert stats.captured == stats.scored == 1 and not stats.problems
    [trace] = traces
    [call] = trace.tool_calls()
    assert call.arguments == {"key": "k1"}
    assert call.result == "page 1"
    [span] = [s for s in trace.spans if s.kind is SpanKind.TOOL]
    cycles = json.dumps([CYCLE] * 3)
    assert span.attributes["agenteval.tool.artifact"] == (
        f"list, {len(cycles)} characters: {cycles}"
    )
    assert trace.output == "fetched"


def test_a_shared_object_graph_is_converted_in_bounded_work(tmp_path: Path) -> None:
    # 3**30 paths: expanded naively this never finishes; visited once per object, it does
    started = time.perf_counter()
    converted = plain(_shared_dag(30), max_nodes=10_000)
    elapsed = time.perf_counter() - started
    text = json.dumps(converted)
    assert text.count('"leaf"') <= 10_000 and "[cut: over agenteval's budget" in text
    assert elapsed < 5  # a bound on work, loose enough for any machine; naive is ~forever
    # a graph within the budget is kept whole: depth 5 has 3**5 leaves
    assert json.dumps(plain(_shared_dag(5))).count('"leaf"') == 3**5

    traces, stats = _run_tool_returning("exported", tmp_path, artifact=_shared_dag(30))
    assert stats.captured == stats.scored == 1 and not stats.problems
    [span] = [s for s in traces[0].spans if s.kind is SpanKind.TOOL]
    assert span.attributes["agenteval.tool.artifact"].startswith("list, ")
    assert span.output == "exported"


def test_a_lone_surrogate_and_a_huge_integer_are_captured_and_readable(tmp_path: Path) -> None:
    traces, stats = _run_tool_returning(
        "caf\ud800e", tmp_path, artifact={"count": 10**5000}, key="k\udc00", count=2**70
    )
    assert stats.captured == stats.scored == 1 and not stats.problems
    [trace] = traces
    [call] = trace.tool_calls()
    # a lone half becomes U+FFFD, the rest of the text is kept; past Python's 4,300-digit
    # str limit an integer is written in hexadecimal (exact), beyond 64 bits in decimal
    assert call.arguments == {"key": "k\ufffd", "count": str(2**70)}
    assert call.result == "caf\ufffde"
    [span] = [s for s in trace.spans if s.kind is SpanKind.TOOL]
    count_text = json.dumps({"count": hex(10**5000)})
    assert span.attributes["agenteval.tool.artifact"] == (
        f"dict, {len(count_text):,} characters: {count_text[:200]}…"
    )
    # every line is standard JSON
    for line in (tmp_path / "c.jsonl").read_text(encoding="utf-8").splitlines():
        json.loads(line)


def test_a_trace_built_by_hand_with_odd_values_is_captured_with_or_without_redaction(
    tmp_path: Path,
) -> None:
    for redactor in ("default", None):
        capture = tmp_path / f"{redactor}.jsonl"
        options: dict[str, Any] = {} if redactor == "default" else {"redactor": None}
        with OnlineEvaluator(
            capture=capture, metrics=["tool_failures"], session_metrics=[], **options
        ) as ev:
            ev.submit(
                Trace(
                    input="a\ud800b",
                    output=object(),
                    spans=[Span(kind=SpanKind.TOOL, name="t", output=_self_containing())],
                )
            )
            assert ev.flush(10)
            assert ev.stats.captured == ev.stats.scored == 1 and not ev.stats.problems
        [trace] = read_capture(capture)
        assert trace.input == "a\ufffdb"
        assert isinstance(trace.output, str) and trace.output.startswith("<object object at")
        assert trace.spans[0].output == ["[cycle: a value that contains itself]"] * 3
