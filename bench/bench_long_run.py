"""One long LangChain run: cost, memory and capture size as the run grows.

An agent reads N pages (one tool call per model call, 2 KB each) in one run, so every model
call is sent the whole conversation so far. Each length runs in a fresh Python twice: with a
no-op callback handler and with agenteval's handler capturing to disk (online scoring off,
so the figures are the recording's). Prints, for N and 4N: the run's wall time with
agenteval over the no-op handler, the process's peak memory over the no-op's, and the
capture's bytes per tool call. Bytes per call that stay flat from N to 4N mean the line
grows with the run, not with its square.

    python -m bench long_run [--quick]
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ._memory import peak_rss_mib

_CHILD = """
import os, sys, time
from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from agenteval_core import OnlineEvaluator

pages, mode, capture = int(sys.argv[1]), sys.argv[2], sys.argv[3]


@tool
def read_page(page: int) -> str:
    \"\"\"Read a page of the manual.\"\"\"
    return f"page {page}: " + "the pump primes in three strokes. " * 60


def reply(messages):
    turn = sum(1 for m in messages if m.type == "ai") + 1
    if turn <= pages:
        return AIMessage("", tool_calls=[tool_call("read_page", f"c{turn}", page=turn)])
    return AIMessage("It primes in three strokes.")


agent = create_agent(ScriptedChatModel(reply=reply), tools=[read_page])
request = {"messages": [("user", "How does the pump prime?")]}
started = time.perf_counter()
if mode == "agenteval":
    with OnlineEvaluator(capture=capture, metrics=[], log=False) as evaluator:
        agent.invoke(request, {"callbacks": [AgentEvalCallbackHandler(evaluator)]})
        evaluator.flush()
        seconds = time.perf_counter() - started
    size = os.path.getsize(capture)
else:
    agent.invoke(request, {"callbacks": [BaseCallbackHandler()]})
    seconds, size = time.perf_counter() - started, 0
print(seconds, size)
"""


def _run(pages: int, mode: str, capture: Path) -> tuple[float, int, float]:
    printed, mib = peak_rss_mib(_CHILD, str(pages), mode, str(capture))
    seconds, size = printed.split()
    return float(seconds), int(size), mib


def main(quick: bool = False) -> None:
    lengths = (50, 200) if quick else (100, 400)
    with tempfile.TemporaryDirectory() as directory:
        for pages in lengths:
            capture = Path(directory) / f"long-{pages}.jsonl"
            plain_seconds, _, plain_mib = _run(pages, "no-op", capture)
            seconds, size, mib = _run(pages, "agenteval", capture)
            print(
                f"{pages} tool calls in one run: wall time {seconds / plain_seconds:.2f}x the "
                f"no-op handler's (until the line is on disk), peak memory {mib:.0f} MiB against "
                f"{plain_mib:.0f} MiB, capture {size / pages / 1024:.1f} KiB per tool call"
            )
