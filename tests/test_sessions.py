"""agenteval_core.session(...): one session per run in every framework, with one handler,
instrumentation or listener for the whole process, and runs of several users at once."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from agenteval_crewai import AgentEvalListener
from agenteval_crewai.testing import ScriptedLLM
from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel
from agenteval_llamaindex import instrument
from crewai import Agent, Crew, Task
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.instrumentation.dispatcher import instrument_tags
from llama_index.core.llms.mock import MockFunctionCallingLLM

from agenteval_core import (
    CallbackSink,
    EvalCase,
    Metric,
    MetricKind,
    MetricResult,
    OnlineEvaluator,
    Score,
    Trace,
    current_session,
    session,
)

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
USERS = [f"user-{i}" for i in range(6)]


@pytest.fixture
def evaluator(tmp_path: Path) -> OnlineEvaluator:
    with OnlineEvaluator(capture=tmp_path / "c.jsonl", metrics=[], session_metrics=[]) as ev:
        yield ev


def test_the_context_manager_nests_and_resets() -> None:
    assert current_session() is None
    with session("outer"):
        with session("inner"):
            assert current_session() == "inner"
        assert current_session() == "outer"
    assert current_session() is None
    with pytest.raises(ValueError, match="a session id is a non-empty string"), session(""):
        pass


def test_langchain_runs_of_concurrent_users(evaluator: OnlineEvaluator) -> None:
    handler = AgentEvalCallbackHandler(evaluator, session_id="the-handler's")  # overridden

    def run(user: str) -> None:
        agent = create_agent(ScriptedChatModel(replies=[AIMessage(f"hi {user}")]), tools=[])
        with session(user):
            agent.invoke({"messages": [("user", f"I am {user}")]}, {"callbacks": [handler]})

    threads = [threading.Thread(target=run, args=(user,)) for user in USERS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    traces = evaluator.captured()
    assert sorted((t.session_id, t.input) for t in traces) == [(u, f"I am {u}") for u in USERS]
    # outside a session block, the handler's own session_id still applies
    agent = create_agent(ScriptedChatModel(replies=[AIMessage("hi")]), tools=[])
    agent.invoke({"messages": [("user", "no block")]}, {"callbacks": [handler]})
    assert evaluator.captured()[-1].session_id == "the-handler's"


def test_llamaindex_runs_of_concurrent_users(evaluator: OnlineEvaluator) -> None:
    instrumentation = instrument(evaluator)  # one for the process
    agent = FunctionAgent(tools=[], llm=MockFunctionCallingLLM())

    async def run(user: str) -> None:
        with session(user):
            await agent.run(f"I am {user}")

    async def everyone() -> None:
        await asyncio.gather(*(run(user) for user in USERS))
        with instrument_tags({"session_id": "tagged"}):  # the framework's own carrier
            await agent.run("tagged run")

    try:
        asyncio.run(everyone())
        traces = evaluator.captured()
    finally:
        instrumentation.uninstrument()
    assert sorted((t.session_id, t.input) for t in traces) == sorted(
        [(u, f"I am {u}") for u in USERS] + [("tagged", "tagged run")]
    )


def test_crewai_kickoffs_of_several_users(evaluator: OnlineEvaluator) -> None:
    listener = AgentEvalListener(evaluator)  # one for the process
    try:
        for user in USERS[:3]:
            llm = ScriptedLLM(
                model="scripted", replies=[f"Thought: easy.\nFinal Answer: hi {user}"]
            )
            agent = Agent(role="greeter", goal="greet", backstory="kind", llm=llm)
            task = Task(description="Greet {name}.", expected_output="a greeting", agent=agent)
            with session(user):
                Crew(agents=[agent], tasks=[task]).kickoff(inputs={"name": user})
        traces = evaluator.captured()
    finally:
        listener.close()
    assert [(t.session_id, t.output) for t in traces] == [(u, f"hi {u}") for u in USERS[:3]]


# --- a session's end: said by the application, or after a time without runs ----------------


def _part_sink(parts: list[tuple[str, int, list[str]]], ended: threading.Event) -> CallbackSink:
    """Each closed session as (id, traces it held, the traces its reliability table lists)."""

    def closed(session_id: str, results: list[MetricResult]) -> None:
        reliability = next(r for r in results if r.name == "agent_reliability")
        listed = list(reliability.metadata.get("per_trace_signals", {}))
        parts.append((session_id, reliability.metadata["total_traces_in_session"], listed))
        ended.set()

    return CallbackSink(lambda trace, results: None, on_session=closed)


def test_end_session_closes_it_with_the_runs_recorded_before_it(tmp_path: Path) -> None:
    # a long-running service used to give a conversation's final session results only at
    # close() (or past max_open_sessions): the results file and report showed it open
    parts: list[tuple[str, int, list[str]]] = []
    evaluator = OnlineEvaluator(
        capture=tmp_path / "c.jsonl",
        results_path=tmp_path / "r.jsonl",
        metrics=["tool_failures"],
        log=False,
        sinks=[_part_sink(parts, threading.Event())],
    )
    handler = AgentEvalCallbackHandler(evaluator, session_id="u1")
    agent = create_agent(ScriptedChatModel(replies=[AIMessage("Booked.")]), tools=[])
    for request in ("Book Rome", "Book Paris"):
        agent.invoke({"messages": [("user", request)]}, {"callbacks": [handler]})
    # at once, while the recorder may still be assembling the second run's trace
    evaluator.end_session("u1")
    agent.invoke({"messages": [("user", "Book Oslo")]}, {"callbacks": [handler]})
    assert evaluator.flush(10)
    first, second, third = (t.id for t in evaluator.captured())
    assert parts == [("u1", 2, [first, second])]
    evaluator.close()
    assert parts == [("u1", 2, [first, second]), ("u1", 1, [third])]
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [(line.get("trace_id"), line["session_id"]) for line in lines] == [
        (first, "u1"),
        (second, "u1"),
        (None, "u1"),  # the session's line, before the run that came after its end
        (third, "u1"),
        (None, "u1"),
    ]


class _Gate(Metric):
    """Holds every trace on a worker thread until the test opens it: traces in flight."""

    name = "gate"
    kind = MetricKind.DETERMINISTIC
    blocking = True

    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        assert self.open.wait(10)
        return Score(1.0, "through")


def test_a_session_ended_while_its_traces_are_scored_closes_when_the_last_is_in() -> None:
    parts: list[tuple[str, int, list[str]]] = []
    gate = _Gate()
    with OnlineEvaluator(
        capture=None, metrics=[gate], log=False, sinks=[_part_sink(parts, threading.Event())]
    ) as evaluator:
        for name in ("s0", "s1"):
            evaluator.submit(Trace(id=name, input="q", output=name, session_id="s"))
        evaluator.end_session("s")
        # submitted after the end: a new session of the same id, never the ended one
        evaluator.submit(Trace(id="s2", input="q", output="s2", session_id="s"))
        assert not evaluator.flush(0.3) and parts == []  # all three held at the gate
        gate.open.set()
        assert evaluator.flush(10)
        assert [(p[0], p[1]) for p in parts] == [("s", 2)]
    assert [(p[0], p[1]) for p in parts] == [("s", 2), ("s", 1)]


def test_an_idle_session_closes_while_the_service_runs() -> None:
    parts: list[tuple[str, int, list[str]]] = []
    ended = threading.Event()
    with OnlineEvaluator(
        capture=None,
        metrics=["tool_failures"],
        log=False,
        session_idle_timeout=0.2,
        sinks=[_part_sink(parts, ended)],
    ) as evaluator:
        for name in ("a0", "a1"):
            evaluator.submit(Trace(id=name, input="q", output=name, session_id="a"))
        assert ended.wait(10)  # no close, no end_session: 0.2 s without a run
        assert parts == [("a", 2, ["a0", "a1"])]
        evaluator.submit(Trace(id="a2", input="q", output="a2", session_id="a"))
        assert evaluator.flush(10)
        assert evaluator.stats.sessions_cut == 0  # an idle close is no cut
    assert parts[1:] == [("a", 1, ["a2"])]
    for wrong in (0, -1.0):
        with pytest.raises(ValueError, match="session_idle_timeout must be a number of sec"):
            OnlineEvaluator(capture=None, session_idle_timeout=wrong)
