"""How soon a finished trace is on disk: capture latency for traces with 2 MB tool results.

First, one step alone: a finished trace is redacted and appended to the capture before
anything else happens to it; this times that step (``OnlineEvaluator.submit``) for traces
whose two tool calls returned 2 MB each (the results also appear in the next LLM call's
input), against writing the same trace as JSON with no redaction (goal: at most 50 ms).

Then under load: four agent threads run real LangGraph agents at once, each run calling a
tool twice that returns 2 MB, with the default metrics scoring in the background; another
process tails the capture and notes when each run's line is whole on disk. It prints the lag from a
run's return to its line, p50 and p95 (goal: p95 at most 100 ms), for tool results that are
text and for results that are 2.6 MB of JSON records.

    python -m bench capture [--quick]
"""

from __future__ import annotations

import multiprocessing
import re
import statistics
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from agenteval_core import OnlineEvaluator, Span, SpanKind, ToolCall, Trace

RESULT = ("order line: item 42, qty 3; " * 80_000)[:2_000_000]


def _trace() -> Trace:
    spans = [Span(kind=SpanKind.AGENT, name="agent")]
    for index in range(2):
        call = ToolCall(name="export_orders", arguments={"page": index}, result=RESULT)
        spans.append(Span(kind=SpanKind.TOOL, name=call.name, output=RESULT, tool_call=call))
        spans.append(
            Span(kind=SpanKind.LLM, name="model", input=[{"role": "tool", "content": RESULT}])
        )
    return Trace(input="Export all orders", output="Done.", spans=spans)


def _lags(capture: Path, result: Any, threads: int, runs: int) -> list[float]:
    """Milliseconds from each run's return to its whole line in the capture."""
    from agenteval_langchain import AgentEvalCallbackHandler
    from agenteval_langchain.testing import ScriptedChatModel, tool_call
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    @tool
    def export_orders(page: int) -> Any:
        """Export one page of orders."""
        return result

    evaluator = OnlineEvaluator(capture=capture, log=False)
    returned: dict[str, float] = {}
    # the reader is a process of its own, as a log shipper tailing the capture would be: in
    # this process it would compete with the recorder for the interpreter it measures
    spawn = multiprocessing.get_context("spawn")
    connection, readers_end = spawn.Pipe()
    reader = spawn.Process(target=_tail, args=(capture, readers_end))
    reader.start()
    connection.recv()  # the reader has the file open: no run ends before it looks

    def agent_thread(thread: int) -> None:
        handler = AgentEvalCallbackHandler(evaluator, session_id=f"orders-{thread}")
        for i in range(runs):
            calls = [tool_call("export_orders", f"c{thread}-{i}-{k}", page=k) for k in (1, 2)]
            model = ScriptedChatModel(
                replies=[AIMessage("", tool_calls=calls), AIMessage("All orders exported.")]
            )
            agent = create_agent(model, [export_orders])
            text = f"export {thread}-{i}"
            agent.invoke({"messages": [("user", text)]}, {"callbacks": [handler]})
            returned[text] = time.monotonic()

    agents = [threading.Thread(target=agent_thread, args=(k,)) for k in range(threads)]
    for agent in agents:
        agent.start()
    for agent in agents:
        agent.join()
    evaluator.flush(120)
    connection.send("complete")
    on_disk: dict[str, float] = connection.recv()
    reader.join()
    evaluator.close()
    return sorted((on_disk[k] - ended) * 1000 for k, ended in returned.items() if k in on_disk)


def _tail(capture: Path, connection: Connection) -> None:
    """Note when each run's line is whole in the capture (``time.monotonic`` is the same
    clock in every process), until told the capture is complete; send back what it saw."""
    request = re.compile(rb'"input":"(export [0-9-]+)"')
    on_disk: dict[str, float] = {}
    complete = False
    # keeps only the start of the line being read (where its request is) and looks for its
    # end in each new chunk: linear in the bytes read
    with open(capture, "rb") as file:
        connection.send("ready")
        head = b""
        while True:
            chunk = file.read(1 << 20)
            if not chunk:
                if complete:  # read to the end once more after the last write
                    break
                complete = connection.poll()
                time.sleep(0.001)  # polling the file: the reader's pace, not a wait
                continue
            start = 0
            while True:
                end = chunk.find(b"\n", start)
                stop = len(chunk) if end < 0 else end
                if len(head) < 4096:
                    head += chunk[start : min(stop, start + 4096 - len(head))]
                if end < 0:
                    break
                found = request.search(head)
                if found:
                    on_disk[found[1].decode()] = time.monotonic()
                head, start = b"", end + 1
    connection.send(on_disk)


RECORDS = [
    {"type": "order", "id": i, "item": "widget", "qty": 3, "status": "shipped", "note": "x" * 40}
    for i in range(20_000)
]


def main(quick: bool = False) -> None:
    _alone(quick)
    runs = 5 if quick else 25
    for label, result in (("text", RESULT), ("JSON records", RECORDS)):
        with tempfile.TemporaryDirectory() as name:
            lags = _lags(Path(name) / "capture.jsonl", result, threads=4, runs=runs)
        p95 = lags[max(0, round(0.95 * len(lags)) - 1)]
        print(
            f"4 agent threads, 2 x 2 MB {label} results per run, {len(lags)} runs: return → "
            f"line on disk p50 {statistics.median(lags):.0f} ms, p95 {p95:.0f} ms "
            "(goal p95 <= 100 ms)"
        )


def _alone(quick: bool) -> None:
    runs = 10 if quick else 40
    ours, plain = [], []
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        evaluator = OnlineEvaluator(
            capture=directory / "capture.jsonl", metrics=[], session_metrics=[], log=False
        )
        with open(directory / "plain.jsonl", "ab", buffering=0) as baseline:
            for _ in range(runs):  # interleaved, so a busy moment falls on both
                trace = _trace()
                started = time.perf_counter()
                evaluator.submit(trace)
                ours.append(time.perf_counter() - started)
                started = time.perf_counter()
                baseline.write(trace.to_json().encode() + b"\n")
                plain.append(time.perf_counter() - started)
        evaluator.close()
    ours_ms, plain_ms = statistics.median(ours) * 1000, statistics.median(plain) * 1000
    print(f"traces with 2 x 2 MB tool results (12 MB of strings each), {runs} runs, medians")
    print(f"capture (redact, cut, append): {ours_ms:.1f} ms (goal <= 50 ms)")
    print(f"plain JSON write of the same trace: {plain_ms:.1f} ms")
    print(f"ratio capture / plain write: {ours_ms / plain_ms:.2f}")
