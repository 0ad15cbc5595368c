"""Durability under kills, with real agent loops in real processes.

An agent process runs four LangChain agents at once on four threads, each run calling a tool
that returns 2 MB twice, with agenteval's handler and the default metrics, and notes the
moment each run returned. It is killed with SIGKILL at a random moment; every run that had
returned more than 200 ms before the kill must be in the capture. Two worker processes share one capture while one of them is killed mid-write again
and again; no trace of the healthy worker may be lost.

The default run kills a few times; ``nox -s tests_long`` sets ``AGENTEVAL_KILLS`` to 30.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import IO

import pytest

from agenteval_core import CaptureFormatError, read_capture

KILLS = int(os.environ.get("AGENTEVAL_KILLS", "3"))

AGENT = textwrap.dedent(
    """
    import sys, threading, time
    from agenteval_core import OnlineEvaluator
    from agenteval_langchain import AgentEvalCallbackHandler
    from agenteval_langchain.testing import ScriptedChatModel, tool_call
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    RESULT = ("order 42, qty 3, shipped; " * 80_000)[:2_000_000]

    @tool
    def export_orders(page: int) -> str:
        \"\"\"Export one page of orders.\"\"\"
        return RESULT

    evaluator = OnlineEvaluator(capture=sys.argv[1], log=False)
    printing = threading.Lock()

    def agent_thread(thread):  # four agents at once, each run calling the tool twice
        handler = AgentEvalCallbackHandler(evaluator, session_id=f"orders-{thread}")
        for i in range(100_000):
            model = ScriptedChatModel(replies=[
                AIMessage("", tool_calls=[
                    tool_call("export_orders", f"call_{thread}_{i}_a", page=2 * i),
                    tool_call("export_orders", f"call_{thread}_{i}_b", page=2 * i + 1),
                ]),
                AIMessage("All orders exported."),
            ])
            agent = create_agent(model, [export_orders])
            request = f"export pages of {thread}-{i}"
            agent.invoke({"messages": [("user", request)]}, {"callbacks": [handler]})
            with printing:  # the run has returned
                print(f"{request} {time.monotonic()}", flush=True)

    for thread in range(4):
        threading.Thread(target=agent_thread, args=(thread,), daemon=True).start()
    threading.Event().wait()
    """
)


def _lines(stream: IO[str], count: int) -> list[str]:
    """The next ``count`` lines a child process writes (pytest's timeout bounds the wait)."""
    lines = []
    for _ in range(count):
        line = stream.readline()
        if not line:
            pytest.fail(f"the process ended after {len(lines)} of {count} lines")
        lines.append(line)
    return lines


def _write_pieces(worker: subprocess.Popen[str], count: int) -> None:
    """Let a doomed worker write ``count`` pieces of its capture lines, then leave it
    waiting, so a kill lands right after the last of them."""
    assert worker.stdin is not None and worker.stdout is not None
    for written in range(1, count + 1):
        _lines(worker.stdout, 1)
        if written < count:
            worker.stdin.write("\n")
            worker.stdin.flush()


def _finished_runs(lines: list[str]) -> list[tuple[str, float]]:
    runs = []
    for line in lines:
        request, _, moment = line.strip().rpartition(" ")
        runs.append((request, float(moment)))
    return runs


@pytest.mark.parametrize("kill", range(KILLS))
def test_sigkill_under_load_loses_no_run_that_ended_200_ms_before_it(
    kill: int, tmp_path: Path
) -> None:
    capture = tmp_path / "c.jsonl"
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT, str(capture)], stdout=subprocess.PIPE, text=True
    )
    assert agent.stdout is not None
    try:
        # killed just after a random run returned, while the runs before it may still be on
        # their way to the capture: the moment a lagging capture would lose them
        lines = _lines(agent.stdout, random.Random(kill).randint(20, 80))
        killed_at = time.monotonic()  # CLOCK_MONOTONIC: one clock for both processes
        os.kill(agent.pid, signal.SIGKILL)
    finally:
        agent.kill()
        agent.wait(10)
    lines += agent.stdout.readlines()  # runs that returned before the kill landed
    errors: list[CaptureFormatError] = []
    captured = {trace.input for trace in read_capture(capture, on_error=errors.append)}
    runs = _finished_runs(lines)
    due = [request for request, ended in runs if ended < killed_at - 0.2]
    assert len(due) >= 2
    lost = [
        (request, round(killed_at - ended, 3)) for request, ended in runs if request not in captured
    ]
    assert [request for request in due if request not in captured] == [], lost
    assert all(error.truncated for error in errors)  # at most the line being written


WORKER = textwrap.dedent(
    """
    import os, sys, time
    from agenteval_core import OnlineEvaluator, Span, SpanKind, ToolCall, Trace
    name, capture, size, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    evaluator = OnlineEvaluator(capture=capture, metrics=[], session_metrics=[], log=False)
    if name.startswith("doomed"):
        # The system may take part of a large write (a signal, a network file system); here
        # it always does, 64 kB at a time, and after each piece waits for the test's word to
        # go on, so the test's kill lands exactly after the piece it chose.
        class Splitting:
            def __init__(self, file):
                self.file = file
            def write(self, data):
                written = self.file.write(data[:65536])
                print("piece", flush=True)
                sys.stdin.readline()
                return written
            def __getattr__(self, name):
                return getattr(self.file, name)
        evaluator._capture._file = Splitting(evaluator._capture._file)
    i = 0
    while not os.path.exists(stop):
        # pages of 50 kB, under the redactor's cut: `size` bytes of tool results in all
        calls = [
            ToolCall(name="export_orders", arguments={"page": p}, result="o" * min(size, 50_000))
            for p in range(max(1, size // 100_000))
        ]
        evaluator.submit(Trace(
            input=f"{name} {i}", output="done", session_id=name,
            spans=[Span(kind=SpanKind.TOOL, name=c.name, tool_call=c, output=c.result)
                   for c in calls],
        ))
        i += 1
        time.sleep(0.005)  # the workload's pace (an agent between runs), not a wait
    evaluator.close()
    print(i)
    """
)


def test_two_workers_one_killed_mid_write_20_times_lose_no_healthy_trace(tmp_path: Path) -> None:
    capture, stop = tmp_path / "shared.jsonl", tmp_path / "stop"
    healthy = subprocess.Popen(
        [sys.executable, "-c", WORKER, "healthy", str(capture), "2000", str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    kills = 0
    try:
        while kills < 20:
            # the doomed worker writes 4 MB lines, so a kill lands mid-line most times
            doomed = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    WORKER,
                    f"doomed{kills}",
                    str(capture),
                    "4000000",
                    str(stop),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            _write_pieces(doomed, random.Random(kills).randint(16, 128))  # of 64 kB each
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(10)
            kills += 1
        stop.touch()
        written = int(healthy.communicate(timeout=120)[0])
    finally:
        healthy.kill()
    errors: list[CaptureFormatError] = []
    inputs = [trace.input for trace in read_capture(capture, on_error=errors.append)]
    assert [i for i in inputs if i.startswith("healthy")] == [
        f"healthy {i}" for i in range(written)
    ]
    assert len(errors) >= 10  # most kills did land mid-line (18 of 20 here, every run)
    assert [str(e) for e in errors if not e.truncated] == []  # only the doomed fragments
    # each fragment was closed off on a line of its own, so after every kill the file is valid
    # JSON Lines again: the standard json module reads every line but the fragments
    assert not any("recovered" in str(e) for e in errors)  # nothing glued to a fragment
    unreadable, read = 0, []
    with open(capture, encoding="utf-8", errors="replace") as file:
        for line in file:
            try:
                read.append(json.loads(line)["input"])
            except ValueError:
                unreadable += 1
    assert unreadable == len(errors)
    assert [i for i in read if i.startswith("healthy")] == [f"healthy {i}" for i in range(written)]
