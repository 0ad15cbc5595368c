"""The CrewAI adapter, driven by real crews with a scripted LLM and real tools."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agenteval_crewai import AgentEvalListener
from agenteval_crewai._scripted import ScriptedLLM
from capture_helpers import captured_by
from crewai import Agent, Crew, Task
from crewai.tools import BaseTool, tool

from agenteval_core import (
    AGENT_NAME,
    LoopAlert,
    MetricResult,
    OnlineEvaluator,
    Sink,
    SpanKind,
)
from agenteval_core.recording import PROVIDER_NAME

ORDERS = {"A-1": "shipped", "A-2": "processing"}


@tool("lookup_order")
def lookup_order(order_id: str) -> str:
    """Status of an order by id."""
    if order_id not in ORDERS:
        raise ValueError(f"no order {order_id}")
    return ORDERS[order_id]


class Refund(BaseTool):
    name: str = "refund"
    description: str = "Refund an order."

    def _run(self, order_id: str) -> str:
        return f"refunded {order_id}"


def action(name: str, **arguments: Any) -> str:
    import json

    return f"Thought: I should use {name}.\nAction: {name}\nAction Input: {json.dumps(arguments)}"


def crew_for(llm: ScriptedLLM, question: str = "Where is A-1? Refund it.") -> Crew:
    agent = Agent(
        role="support",
        goal="help customers",
        backstory="careful",
        llm=llm,
        tools=[lookup_order, Refund()],
        verbose=False,
    )
    task = Task(description=question, expected_output="an answer", agent=agent)
    return Crew(agents=[agent], tasks=[task], verbose=False)


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[AgentEvalListener]:
    alerts: list[LoopAlert] = []
    evaluator = OnlineEvaluator(capture=tmp_path / "capture.jsonl", on_alert=alerts.append)
    evaluator.alerts = alerts  # type: ignore[attr-defined]
    created = AgentEvalListener(evaluator, session_id="crew-session")
    yield created
    created.close()
    evaluator.close()


def test_crew_run_becomes_a_trace(listener: AgentEvalListener) -> None:
    llm = ScriptedLLM(
        model="scripted",
        replies=[
            action("lookup_order", order_id="A-1"),
            action("refund", order_id="A-1"),
            "Thought: I know it.\nFinal Answer: A-1 shipped and was refunded.",
        ],
    )
    result = crew_for(llm).kickoff()
    assert str(result) == "A-1 shipped and was refunded."
    [trace] = captured_by(listener)
    assert trace.framework == "crewai" and trace.session_id == "crew-session"
    assert trace.input == "Where is A-1? Refund it."
    assert trace.output == "A-1 shipped and was refunded."
    kinds = [span.kind for span in trace.spans]
    assert kinds[:3] == [SpanKind.AGENT, SpanKind.TASK, SpanKind.AGENT]
    ids = {span.id for span in trace.spans}
    assert all(span.parent_id in ids for span in trace.spans[1:])
    calls = trace.tool_calls()
    assert [(c.name, c.arguments, c.result) for c in calls] == [
        ("lookup_order", {"order_id": "A-1"}, "shipped"),
        ("refund", {"order_id": "A-1"}, "refunded A-1"),
    ]
    llms = trace.spans_of(SpanKind.LLM)
    assert len(llms) == 3
    # each tool call is linked to the LLM message that asked for it
    assert [c.id for c in llms[0].requested_tool_calls] == [calls[0].id]
    assert llms[0].thought == "I should use lookup_order."
    assert trace.token_usage() == {"input_tokens": 30, "output_tokens": 15}
    # every span the agent ran says so (gen_ai.agent.name: its role); the crew and task do not
    named = [
        (span.kind, span.attributes.get(AGENT_NAME))
        for span in trace.spans
        if span.kind in (SpanKind.AGENT, SpanKind.LLM, SpanKind.TOOL)
    ]
    assert named[0] == (SpanKind.AGENT, None)  # the crew
    assert named[1:] == [(kind, "support") for kind, _ in named[1:]] and len(named) == 7
    # the provider the LLM says it is, on each model call (CrewAI's LLM emits its events)
    assert [span.attributes.get(PROVIDER_NAME) for span in llms] == ["scripted"] * 3
    tools = {spec.name: spec for spec in trace.tools}
    assert set(tools) == {"lookup_order", "refund"}
    assert tools["lookup_order"].parameters is not None
    assert tools["lookup_order"].parameters["required"] == ["order_id"]


def test_the_evaluator_waits_for_events_the_bus_has_not_delivered(
    listener: AgentEvalListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CrewAI hands events to async handlers on its own loop and, unless its own tracing
    # drains the bus at the end, does not wait for the kickoff's last one: here another
    # handler leaves that loop busy as the kickoff ends
    from crewai.events import TaskCompletedEvent, crewai_event_bus

    monkeypatch.setenv("CREWAI_TRACING_ENABLED", "false")

    async def slow(source: Any, event: Any) -> None:
        # returns at once (the kickoff's flush of the bus is done), then blocks the loop
        # ahead of the kickoff-completed event's handlers
        asyncio.get_running_loop().call_soon(time.sleep, 0.5)

    crewai_event_bus.on(TaskCompletedEvent)(slow)
    try:
        llm = ScriptedLLM(model="scripted", replies=["Thought: done.\nFinal Answer: late."])
        crew_for(llm).kickoff()
        traces = listener.evaluator.captured()  # not the listener's flush: the evaluator's
    finally:
        crewai_event_bus.off(TaskCompletedEvent, slow)
    assert [(t.status, t.output) for t in traces] == [("ok", "late.")]


def test_end_session_right_after_a_kickoff_closes_the_session_with_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the bus still holds the kickoff's last event when kickoff() returns and the
    # application ends the conversation: the end must wait for it, never close the session
    # without its run (which would then open a session of its own, closed only at close)
    from crewai.events import CrewKickoffCompletedEvent

    monkeypatch.setenv("CREWAI_TRACING_ENABLED", "false")
    closed: list[tuple[str, list[MetricResult]]] = []

    class Ends(Sink):
        def session_scored(self, session_id: str, results: list[MetricResult]) -> None:
            closed.append((session_id, results))

    evaluator = OnlineEvaluator(capture=tmp_path / "capture.jsonl", sinks=[Ends()])
    listener = AgentEvalListener(evaluator, session_id="chat-7")
    pump = evaluator.recorder.pump
    put, bus_delivered = pump.put, threading.Event()

    def delivered_late(event: tuple[Any, ...]) -> None:
        if len(event) > 1 and isinstance(event[1], CrewKickoffCompletedEvent):  # bus thread
            bus_delivered.wait(10)
        put(event)

    monkeypatch.setattr(pump, "put", delivered_late)
    try:
        llm = ScriptedLLM(model="scripted", replies=["Thought: done.\nFinal Answer: bye."])
        crew_for(llm).kickoff()
        evaluator.end_session("chat-7")  # returns at once, the bus still holding the event
        bus_delivered.set()
        assert evaluator.flush(10)
        assert [session for session, _ in closed] == ["chat-7"]
        (trace,) = evaluator.captured()
        signals = closed[0][1][0].metadata["per_trace_signals"]
        assert (trace.session_id, trace.output, list(signals)) == (
            "chat-7",
            "bye.",
            [trace.id],
        )
    finally:
        bus_delivered.set()
        listener.close()
        evaluator.close()
    assert [session for session, _ in closed] == ["chat-7"]  # and no second one at close


def test_tool_error_is_captured(listener: AgentEvalListener) -> None:
    llm = ScriptedLLM(
        model="scripted",
        replies=[
            action("lookup_order", order_id="Z-9"),
            "Thought: done\nFinal Answer: No such order.",
        ],
    )
    crew_for(llm, "Where is Z-9?").kickoff()
    [trace] = captured_by(listener)
    failed = [c for c in trace.tool_calls() if c.failed]
    assert failed and all(c.error == "no order Z-9" for c in failed)
    assert trace.output == "No such order."


def test_llm_failure_at_the_root_is_captured(listener: AgentEvalListener) -> None:
    def broken(messages: Any) -> str:
        raise ConnectionError("model endpoint down")

    with pytest.raises(ConnectionError):
        crew_for(ScriptedLLM(model="scripted", reply=broken)).kickoff()
    [trace] = captured_by(listener)
    assert trace.error is not None and "model endpoint down" in trace.error


def test_a_failed_kickoff_is_captured_under_a_scope_an_earlier_run_left_open(
    listener: AgentEvalListener,
) -> None:
    # a run that failed earlier on this thread can leave CrewAI's event scope stack holding
    # one of its events: every later kickoff's events name it as their parent
    from crewai.events.event_context import event_scope

    def broken(messages: Any) -> str:
        raise ConnectionError("model endpoint down")

    with event_scope("left-by-an-earlier-run", "task_started"), pytest.raises(ConnectionError):
        crew_for(ScriptedLLM(model="scripted", reply=broken)).kickoff()
    [trace] = captured_by(listener)
    assert trace.status == "error"
    assert trace.error is not None and "model endpoint down" in trace.error


def test_concurrent_crews_do_not_mix(listener: AgentEvalListener) -> None:
    def run(order: str) -> None:
        llm = ScriptedLLM(
            model="scripted",
            replies=[
                action("lookup_order", order_id=order),
                f"Thought: ok\nFinal Answer: answer for {order}",
            ],
        )
        crew_for(llm, f"status of {order}").kickoff()

    threads = [threading.Thread(target=run, args=(order,)) for order in ["A-1", "A-2"] * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    traces = captured_by(listener)
    assert len(traces) == 6
    for trace in traces:
        order = str(trace.input).split()[-1]
        [call] = trace.tool_calls()
        assert call.arguments == {"order_id": order} and trace.output == f"answer for {order}"


def test_loop_alert_on_the_looping_crew_only(listener: AgentEvalListener) -> None:
    normal = ScriptedLLM(
        model="scripted",
        replies=[action("lookup_order", order_id="A-1"), "Thought: ok\nFinal Answer: shipped"],
    )
    crew_for(normal).kickoff()
    captured_by(listener)
    assert listener.evaluator.alerts == []  # type: ignore[attr-defined]
    looping = ScriptedLLM(
        model="scripted",
        replies=[action("lookup_order", order_id="A-2")] * 4
        + ["Thought: giving up\nFinal Answer: still processing"],
    )
    crew_for(looping).kickoff()
    captured_by(listener)
    alerts = listener.evaluator.alerts  # type: ignore[attr-defined]
    assert [a.pattern for a in alerts] == ["repeated_call"]
    assert alerts[0].calls[0].arguments == {"order_id": "A-2"}


def test_guard_refuses_the_looping_call(tmp_path: Path) -> None:
    # CrewAI refuses an immediately repeated identical call itself; the guard catches what it
    # lets through: a cycle poll → status → poll → status, and a third identical poll.
    alerts: list[LoopAlert] = []
    evaluator = OnlineEvaluator(capture=tmp_path / "c.jsonl", on_alert=alerts.append)
    guarded = AgentEvalListener(evaluator, stop_on_loop=True)
    ran: list[str] = []

    @tool("poll")
    def poll(job_id: str) -> str:
        """Poll a job."""
        ran.append("poll")
        return "pending"

    @tool("status")
    def status(job_id: str) -> str:
        """Status page of a job."""
        ran.append("status")
        return "pending"

    script = [action("poll", job_id="j-7"), action("status", job_id="j-7")] * 3
    llm = ScriptedLLM(
        model="scripted", replies=[*script, "Thought: stop\nFinal Answer: still pending"]
    )
    agent = Agent(
        role="worker", goal="finish", backstory="b", llm=llm, tools=[poll, status], verbose=False
    )
    try:
        Crew(
            agents=[agent],
            tasks=[Task(description="Is job j-7 done?", expected_output="status", agent=agent)],
        ).kickoff()
        assert guarded.flush(20)
    finally:
        guarded.close()
        evaluator.close()
    assert ran == ["poll", "status", "poll"]  # the 4th call closes the cycle and is refused
    assert [a.pattern for a in alerts][:1] == ["cycle"]
