"""CrewAI runs an evaluator must get right: a failed kickoff, sessions per kickoff, agents by
role, and the guard across several kickoffs of one crew."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
from agenteval_crewai import AgentEvalListener
from agenteval_crewai._scripted import ScriptedLLM, native_call
from capture_helpers import captured_by, regression_case
from crewai import LLM, Agent, Crew, Process, Task
from crewai.tools import tool
from judge_server import JudgeServer, Reply
from pollers import TakingTurns, assert_each_poller_loops_alone

from agenteval_core import (
    AGENT_NAME,
    GRAPH_STEP,
    GUARD_REFUSED,
    INTERNAL_CALL,
    TOOL_NOT_RUN,
    CallbackSink,
    EvalCase,
    LoopAlert,
    OnlineEvaluator,
    RunStatus,
    SpanKind,
    Trace,
    session,
)
from agenteval_core.metrics import ParameterCorrectness, ToolCallLoops, ToolFailures
from agenteval_core.metrics._judge_base import describe_trace


def action(name: str, **arguments: Any) -> str:
    return f"Thought: check.\nAction: {name}\nAction Input: {json.dumps(arguments)}"


def one_call_crew(order_tool: Any, answer: str, **agent_options: Any) -> Crew:
    """One support agent on one task, "Where is A-1?": its model calls ``order_tool`` for
    A-1, then answers ``answer``."""
    llm = ScriptedLLM(
        model="scripted",
        replies=[action(order_tool.name, order_id="A-1"), f"Thought: done\nFinal Answer: {answer}"],
    )
    agent = Agent(
        role="support",
        goal="answer",
        backstory="b",
        llm=llm,
        tools=[order_tool],
        verbose=False,
        **agent_options,
    )
    return Crew(
        agents=[agent], tasks=[Task(description="Where is A-1?", expected_output="x", agent=agent)]
    )


def support_run(
    evaluator: OnlineEvaluator,
    llm: Any,
    question: str,
    answer: str,
    crew_options: dict[str, Any] | None = None,
    **agent_options: Any,
) -> Trace:
    """The trace of one support agent on one task, ``question``, which it answers
    ``answer`` (checked)."""
    agent = Agent(
        role="support", goal="answer", backstory="b", llm=llm, verbose=False, **agent_options
    )
    crew = Crew(
        agents=[agent],
        tasks=[Task(description=question, expected_output="x", agent=agent)],
        **(crew_options or {}),
    )
    listener = AgentEvalListener(evaluator)
    try:
        assert str(crew.kickoff()) == answer
        [trace] = captured_by(listener)
    finally:
        listener.close()
    return trace


def test_a_failed_kickoff_becomes_one_trace_that_says_so(evaluator: OnlineEvaluator) -> None:
    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        raise ValueError("database down")

    crew = one_call_crew(lookup_order, "sorry", tool_failure_policy="raise")
    listener = AgentEvalListener(evaluator)
    try:
        with pytest.raises(Exception, match="database down"):
            crew.kickoff(inputs={"session_id": "user-1"})
        [trace] = captured_by(listener)
    finally:
        listener.close()
    message = "Tool 'lookup_order' failed during 'Where is A-1?': database down (code: ValueError)"
    assert (trace.status, trace.error, trace.status_reason) == (RunStatus.ERROR, message, message)
    assert trace.session_id == "user-1"
    [agent_span] = [s for s in trace.spans if s.kind is SpanKind.AGENT and s.parent_id is not None]
    assert agent_span.name == "support" and agent_span.error == message
    assert all(s.end_time is not None for s in trace.spans)
    assert listener.translator.assembler.open_traces() == 0  # nothing left behind


def test_a_task_past_max_execution_time_is_a_timeout(evaluator: OnlineEvaluator) -> None:
    @tool("slow_lookup")
    def slow_lookup(order_id: str) -> str:
        """Status of an order, slowly."""
        time.sleep(1.5)  # past the agent's 1 s, whatever the machine
        return "shipped"

    crew = one_call_crew(slow_lookup, "shipped", max_execution_time=1, max_retry_limit=0)
    listener = AgentEvalListener(evaluator)
    try:
        with pytest.raises(TimeoutError, match="execution timed out after 1 seconds"):
            crew.kickoff()
        [trace] = captured_by(listener)
    finally:
        listener.close()
    message = (
        "Task 'Where is A-1?' execution timed out after 1 seconds. Consider increasing "
        "max_execution_time or optimizing the task."
    )
    assert (trace.status, trace.status_reason, trace.error) == (RunStatus.TIMEOUT, message, message)


def test_sessions_are_per_kickoff_and_the_guard_starts_clean_each_time(
    evaluator: OnlineEvaluator,
) -> None:
    ran: list[str] = []

    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        ran.append(order_id)
        return "processing"

    @tool("note")
    def note(text: str) -> str:
        """Write a note."""
        return "noted"

    loop = [
        action("lookup_order", order_id="A-2"),
        action("note", text="one"),
        action("lookup_order", order_id="A-2"),
        action("note", text="two"),
        action("lookup_order", order_id="A-2"),
        "Thought: stop\nFinal Answer: still processing",
    ]
    llm = ScriptedLLM(model="scripted", replies=loop * 2)
    agent = Agent(
        role="support",
        goal="answer",
        backstory="b",
        llm=llm,
        tools=[lookup_order, note],
        verbose=False,
    )
    crew = Crew(
        agents=[agent], tasks=[Task(description="Is A-2 ready?", expected_output="x", agent=agent)]
    )
    listener = AgentEvalListener(evaluator, stop_on_loop=True)
    try:
        crew.kickoff(inputs={"session_id": "user-1"})
        crew.kickoff(inputs={"session_id": "user-2"})  # the same crew, task and agent ids
        first, second = captured_by(listener)
    finally:
        listener.close()
    assert ran == ["A-2", "A-2", "A-2", "A-2"]  # two lookups per kickoff; each third refused
    assert (first.session_id, second.session_id) == ("user-1", "user-2")
    for trace in (first, second):
        # the session key is not the request (it was: input {'session_id': 'user-1'})
        assert trace.input == "Is A-2 ready?" and trace.spans[0].input is None
        assert trace.status is RunStatus.STOPPED
        refused = [s for s in trace.spans if s.attributes.get(GUARD_REFUSED)]
        assert [(s.tool_call.name, s.tool_call.arguments) for s in refused if s.tool_call] == [
            ("lookup_order", {"order_id": "A-2"})
        ]
    assert len(evaluator.guard) == 0


@pytest.mark.parametrize("reused_ids", [False, True])
def test_native_tool_calling_records_the_provider_calls_and_alerts_on_repeats(
    evaluator: OnlineEvaluator, reused_ids: bool
) -> None:
    @tool("get_weather")
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        return f"sunny in {city}"

    # a function-calling model: two calls in one reply, then the same call three more times;
    # a model server that reuses ids gives every Paris call one id: each is a call of its own
    ids = ["0", "1", "0", "0"] if reused_ids else ["call_0_0", "call_0_1", "call_1_0", "call_2_0"]
    llm = ScriptedLLM(
        model="gpt-4o",
        native=True,
        replies=[
            [native_call(ids[0], "get_weather", city="Paris"),
             native_call(ids[1], "get_weather", city="Oslo")],
            [native_call(ids[2], "get_weather", city="Paris")],
            [native_call(ids[3], "get_weather", city="Paris")],
            "Paris is sunny, Oslo too.",
        ],
    )  # fmt: skip
    agent = Agent(role="forecaster", goal="weather", backstory="b", llm=llm, tools=[get_weather])
    task = Task(description="Weather in Paris and Oslo?", expected_output="short", agent=agent)
    alerts: list[Any] = []
    listener = AgentEvalListener(evaluator)
    evaluator.engine.sinks.append(CallbackSink(on_alert=alerts.append))
    try:
        Crew(agents=[agent], tasks=[task]).kickoff()
        [trace] = captured_by(listener)
    finally:
        listener.close()
    llm_spans = [s for s in trace.spans if s.kind is SpanKind.LLM]
    assert [
        [(c.id, c.name, c.arguments) for c in s.requested_tool_calls or []] for s in llm_spans
    ] == [
        [(ids[0], "get_weather", {"city": "Paris"}), (ids[1], "get_weather", {"city": "Oslo"})],
        [(ids[2], "get_weather", {"city": "Paris"})],
        [(ids[3], "get_weather", {"city": "Paris"})],
        [],
    ]  # fmt: skip
    assert [s.output for s in llm_spans[:3]] == [None, None, None]  # calls, not a repr
    executed = [s.tool_call for s in trace.spans if s.tool_call is not None]
    # CrewAI may run one reply's calls in any order: each run keeps its own request's id
    assert sorted((c.id, c.arguments, c.result) for c in executed) == sorted(
        [
            (ids[0], {"city": "Paris"}, "sunny in Paris"),
            (ids[1], {"city": "Oslo"}, "sunny in Oslo"),
            (ids[2], {"city": "Paris"}, "sunny in Paris"),
            (ids[3], {"city": "Paris"}, "sunny in Paris"),
        ]
    )
    assert len(trace.tool_calls()) == 4  # a model call came between: none ran again
    assert trace.output == "Paris is sunny, Oslo too."
    # the third identical request raised the live alert
    assert [(a.pattern, a.count, a.calls[0].arguments) for a in alerts] == [
        ("repeated_call", 3, {"city": "Paris"})
    ]


@pytest.mark.parametrize("gives_up", [False, True])
def test_a_react_request_crewai_answers_itself_is_a_call_the_agent_made(
    evaluator: OnlineEvaluator, gives_up: bool
) -> None:
    # a ReAct agent asks for the lookup it just ran: CrewAI runs no tool and emits no tool
    # event, answering "I tried reusing the same input..." itself (and fails the task at the
    # agent's fifth such request). The trace held only the calls that ran: an agent that
    # asked for one lookup eight times scored tool_call_loops 1.0 ("no repeated calls or
    # cycles among 1 tool calls") beside the live alert "lookup_order called 3 times"
    ran: list[str] = []

    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        ran.append(order_id)
        return {"A-1": "processing", "B-2": "shipped"}[order_id]

    same = action("lookup_order", order_id="A-1")
    script = [same] * 8 if gives_up else [same, same, action("lookup_order", order_id="B-2")]
    llm = ScriptedLLM(model="scripted", replies=[*script, "Thought: done\nFinal Answer: B-2."])
    alerts: list[Any] = []
    evaluator.engine.sinks.append(CallbackSink(on_alert=alerts.append))
    listener = AgentEvalListener(evaluator)
    agent = Agent(role="support", goal="answer", backstory="b", llm=llm, tools=[lookup_order])
    crew = Crew(
        agents=[agent], tasks=[Task(description="Check A-1.", expected_output="x", agent=agent)]
    )
    try:
        if gives_up:
            with pytest.raises(Exception, match="with the same arguments 5 times"):
                crew.kickoff()
        else:
            assert crew.kickoff().raw == "B-2."
        [trace] = captured_by(listener)
    finally:
        listener.close()
    crewai_said = (
        "I tried reusing the same input, I must stop using this action input. I'll try "
        "something else instead."
    )
    not_run = (
        "not run: the same call as the agent's last one, which CrewAI answers itself: "
        + crewai_said
    )
    asked = [c for s in trace.spans if s.kind is SpanKind.LLM for c in s.requested_tool_calls]
    calls = trace.tool_calls()
    # every request is a call, under its request's id, in the order asked
    assert [c.id for c in calls] == [c.id for c in asked]
    if gives_up:
        assert ran == ["A-1"] and trace.status is RunStatus.ERROR
        assert [(c.arguments, c.result, c.error) for c in calls] == [
            ({"order_id": "A-1"}, "processing", None)
        ] + [({"order_id": "A-1"}, crewai_said, not_run)] * 7
        # the lookup ran once and worked: CrewAI's answers are no failures of the tool
        case = regression_case(evaluator)
        assert (case.tools_must_succeed, case.provenance.failed_tools) == (None, [])
        loops = ToolCallLoops().measure(trace)
        assert (loops.score, loops.reason) == (
            0.0,
            'lookup_order called 3 times with the same arguments {"order_id": "A-1"}',
        )
        assert [a.message for a in alerts] == [loops.reason]  # the metric agrees with the alert
        # at the third request: CrewAI's answer to the second, no tool having run, was no
        # news (it had restarted the count, and the alert came at the fourth)
        [alert] = alerts
        assert [c.id for c in alert.calls] == [c.id for c in asked[:3]]
    else:
        assert ran == ["A-1", "B-2"] and trace.status is RunStatus.OK
        assert [(c.arguments, c.result, c.error) for c in calls] == [
            ({"order_id": "A-1"}, "processing", None),
            ({"order_id": "A-1"}, crewai_said, not_run),
            ({"order_id": "B-2"}, "shipped", None),
        ]
        assert (ToolCallLoops().measure(trace).score, alerts) == (1.0, [])
        # the agent saw the lookup refused and went on to another: recovered, 1 - 1 / (2 × 3)
        failures = ToolFailures().measure(EvalCase(trace=trace))
        assert (failures.score, failures.reason) == (
            pytest.approx(5 / 6),
            "1 of 3 tool calls failed (lookup_order), 0 not recovered",
        )


def test_a_react_agent_the_guard_stops_has_each_request_in_its_place(
    evaluator: OnlineEvaluator,
) -> None:
    # under stop_on_loop=True, the same lookup asked for over and over: CrewAI answers
    # repeats itself until the guard's hook refuses one, and then every one after. Each
    # refusal after the first took the time of the alert, so its span started before the
    # model had asked for it
    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        return "processing"

    llm = ScriptedLLM(model="scripted", replies=[action("lookup_order", order_id="A-1")])
    listener = AgentEvalListener(evaluator, stop_on_loop=True)
    agent = Agent(role="support", goal="answer", backstory="b", llm=llm, tools=[lookup_order])
    crew = Crew(
        agents=[agent], tasks=[Task(description="Check A-1.", expected_output="x", agent=agent)]
    )
    try:
        with pytest.raises(Exception, match="with the same arguments 5 times"):
            crew.kickoff()
        [trace] = captured_by(listener)
    finally:
        listener.close()
    message = 'lookup_order called 3 times with the same arguments {"order_id": "A-1"}'
    assert (trace.status, trace.status_reason) == (
        RunStatus.STOPPED,
        f"stopped by the loop guard: {message}",
    )
    calls = [s for s in trace.spans if s.tool_call is not None]
    assert calls[0].tool_call.result == "processing"  # type: ignore[union-attr]
    refused = [s for s in calls if s.attributes.get(GUARD_REFUSED)]
    assert len(refused) >= 4
    # stopped at the third request: the second, CrewAI's own answer, was no news
    assert [(bool(s.attributes.get(TOOL_NOT_RUN)), s in refused) for s in calls[:3]] == [
        (False, False),
        (True, False),
        (False, True),
    ]
    # each refusal at its own time, after the alert that stopped the run
    times = [s.start_time for s in refused]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert times[0] >= trace.alerts[0].time  # type: ignore[operator]
    # no request recorded twice: a call CrewAI answered, or one the guard refused
    assert len({s.tool_call.id for s in calls}) == len(calls)  # type: ignore[union-attr]
    assert ToolCallLoops().measure(trace).score == 0.0


@pytest.mark.parametrize(
    ("statuses", "alerted"),
    [
        (["processing", "packed", "shipped", "delivered"], []),
        (
            ["processing"] * 4,
            [
                "cycle lookup_order → note repeated 2 times",
                'lookup_order called 3 times with the same arguments {"order_id": "A-2"}',
                'note called 3 times with the same arguments {"text": "wait a minute"}',
            ],
        ),
    ],
    ids=["moves-on", "stays-put"],
)
def test_the_live_alert_reads_what_each_call_returned_as_the_metric_does(
    evaluator: OnlineEvaluator, statuses: list[str], alerted: list[str]
) -> None:
    # without stop_on_loop, the guard watches the calls the model asks for, which never
    # held what the tool returned: an agent polling an order that moved on each time was
    # alerted three times (the cycle, the lookup and the note) while tool_call_loops, reading
    # the trace, scored it 1.0
    left = iter(statuses)

    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        return next(left)

    @tool("note")
    def note(text: str) -> str:
        """Write a note."""
        return "noted"

    poll = [action("lookup_order", order_id="A-2"), action("note", text="wait a minute")]
    llm = ScriptedLLM(
        model="scripted",
        replies=[
            *poll * 3,
            action("lookup_order", order_id="A-2"),
            "Thought: done\nFinal Answer: ok",
        ],
    )
    alerts: list[Any] = []
    evaluator.engine.sinks.append(CallbackSink(on_alert=alerts.append))
    listener = AgentEvalListener(evaluator)
    agent = Agent(role="support", goal="answer", backstory="b", llm=llm, tools=[lookup_order, note])
    crew = Crew(
        agents=[agent], tasks=[Task(description="Is A-2 ready?", expected_output="x", agent=agent)]
    )
    try:
        assert crew.kickoff().raw == "ok"
        [trace] = captured_by(listener)
    finally:
        listener.close()
    assert [c.result for c in trace.tool_calls() if c.name == "lookup_order"] == statuses
    assert [a.message for a in alerts] == alerted
    loops = ToolCallLoops().measure(trace)  # the metric finds what the alerts said
    assert (loops.score, loops.reason) == (
        (0.0, "; ".join(alerted))
        if alerted
        else (1.0, "no repeated calls or cycles among 7 tool calls")
    )


def test_tools_are_listed_by_the_names_they_are_called_by(evaluator: OnlineEvaluator) -> None:
    # CrewAI calls a tool named "Look up order" look_up_order (as it calls its "Delegate work
    # to coworker" delegate_work_to_coworker): the trace lists it by the name calls use
    @tool("Look up order")
    def look_up(order_id: str) -> str:
        """Status of an order."""
        return "shipped"

    llm = ScriptedLLM(
        model="s",
        replies=[action("look_up_order", order_id="A-1"), "Thought: ok\nFinal Answer: shipped"],
    )
    agent = Agent(role="support", goal="g", backstory="b", llm=llm, tools=[look_up])
    listener = AgentEvalListener(evaluator)
    try:
        Crew(
            agents=[agent],
            tasks=[Task(description="Where is A-1?", expected_output="x", agent=agent)],
        ).kickoff()
        [trace] = captured_by(listener)
    finally:
        listener.close()
    assert [spec.name for spec in trace.tools] == ["look_up_order"]
    assert [s.tool_call.name for s in trace.spans if s.tool_call is not None] == ["look_up_order"]


def test_a_hierarchical_crew_and_an_async_kickoff(evaluator: OnlineEvaluator) -> None:
    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        return "shipped"

    worker = ScriptedLLM(
        model="worker",
        replies=[action("lookup_order", order_id="A-1"), "Thought: ok\nFinal Answer: A-1 shipped"],
    )
    manager = ScriptedLLM(
        model="manager",
        replies=[
            action(
                "Delegate work to coworker",
                task="Check order A-1",
                context="the user asks",
                coworker="support",
            ),
            "Thought: done\nFinal Answer: A-1 has shipped",
        ],
    )
    support = Agent(role="support", goal="g", backstory="b", llm=worker, tools=[lookup_order])
    greeter = Agent(
        role="greeter", goal="g", backstory="b",
        llm=ScriptedLLM(model="s", replies=["Thought: easy\nFinal Answer: hi"]),
    )  # fmt: skip
    listener = AgentEvalListener(evaluator)
    try:
        crew = Crew(
            agents=[support],
            tasks=[Task(description="Where is A-1?", expected_output="status")],
            process=Process.hierarchical,
            manager_llm=manager,
        )
        assert str(crew.kickoff(inputs={"session_id": "h"})) == "A-1 has shipped"
        greeting = Crew(
            agents=[greeter], tasks=[Task(description="Greet.", expected_output="x", agent=greeter)]
        )
        assert str(asyncio.run(greeting.kickoff_async(inputs={"session_id": "a"}))) == "hi"
        hierarchical, async_run = captured_by(listener)
    finally:
        listener.close()
    assert (hierarchical.status, hierarchical.session_id, hierarchical.output) == (
        RunStatus.OK,
        "h",
        "A-1 has shipped",
    )
    assert [(s.kind.value, s.name) for s in hierarchical.spans] == [
        ("agent", "crew"),
        ("task", "Where is A-1?"),
        ("agent", "Crew Manager"),
        ("llm", "manager"),
        ("tool", "delegate_work_to_coworker"),
        ("agent", "support"),
        ("llm", "worker"),
        ("tool", "lookup_order"),
        ("llm", "worker"),
        ("llm", "manager"),
    ]
    calls = [s.tool_call for s in hierarchical.spans if s.tool_call is not None]
    assert [
        (c.name, c.arguments.get("coworker") or c.arguments.get("order_id")) for c in calls
    ] == [
        ("delegate_work_to_coworker", "support"),
        ("lookup_order", "A-1"),
    ]
    # the coworker is an agent of the run, inside the manager's delegation: its steps are
    # the run's (a model call a tool makes itself is not)
    assert [
        (step.output.splitlines()[-1] if step.output else None, [c.name for c in step.tool_calls])
        for step in hierarchical.steps()
    ] == [
        ('Action Input: {"task": "Check order A-1", "context": "the user asks", "coworker": '
         '"support"}', ["delegate_work_to_coworker"]),
        ('Action Input: {"order_id": "A-1"}', ["lookup_order"]),  # the coworker's
        ("Final Answer: A-1 shipped", []),
        ("Final Answer: A-1 has shipped", []),
    ]  # fmt: skip
    # the model asked for "Delegate work to coworker": one name for the tool, everywhere
    [asked] = hierarchical.spans[3].requested_tool_calls
    assert (asked.name, asked.id) == ("delegate_work_to_coworker", calls[0].id)
    assert [spec.name for spec in hierarchical.tools] == [
        "delegate_work_to_coworker",
        "ask_question_to_coworker",
        "lookup_order",
    ]
    assert (async_run.status, async_run.session_id, async_run.output) == (RunStatus.OK, "a", "hi")
    assert [s.name for s in async_run.spans] == ["crew", "Greet.", "greeter", "s"]


def test_a_result_from_crewais_tool_cache_says_so(
    evaluator: OnlineEvaluator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CrewAI reports a cache hit with ToolUsageFinishedEvent(from_cache=True). Its 1.x
    # ReAct and native tool paths do not consult the cache, so this run has the bus carry
    # the second result as a hit, as CrewAI's cached path emits it.
    from crewai.events.event_bus import crewai_event_bus
    from crewai.events.types.tool_usage_events import ToolUsageFinishedEvent

    finished: list[Any] = []
    emit = crewai_event_bus.emit

    def as_cached(source: Any, event: Any) -> Any:
        if isinstance(event, ToolUsageFinishedEvent):
            finished.append(event)
            event.from_cache = len(finished) == 2
        return emit(source, event)

    monkeypatch.setattr(crewai_event_bus, "emit", as_cached)

    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        return "shipped"

    llm = ScriptedLLM(
        model="s",
        replies=[
            action("lookup_order", order_id="A-1"),
            action("lookup_order", order_id="A-2"),
            "Thought: ok\nFinal Answer: both shipped",
        ],
    )
    agent = Agent(role="support", goal="g", backstory="b", llm=llm, tools=[lookup_order])
    listener = AgentEvalListener(evaluator)
    try:
        Crew(
            agents=[agent],
            tasks=[Task(description="A-1 and A-2?", expected_output="x", agent=agent)],
        ).kickoff()
        [trace] = captured_by(listener)
    finally:
        listener.close()
    tools = [s for s in trace.spans if s.tool_call is not None]
    assert [
        (s.tool_call.arguments, s.attributes.get("agenteval.tool.from_cache")) for s in tools
    ] == [
        ({"order_id": "A-1"}, None),
        ({"order_id": "A-2"}, True),
    ]


def test_a_second_listener_on_one_evaluator_replaces_the_first(
    evaluator: OnlineEvaluator, caplog: pytest.LogCaptureFixture
) -> None:
    llm = ScriptedLLM(model="scripted", replies=["Thought: easy.\nFinal Answer: hello"])
    agent = Agent(role="greeter", goal="greet", backstory="b", llm=llm, verbose=False)
    crew = Crew(
        agents=[agent], tasks=[Task(description="Say hi", expected_output="x", agent=agent)]
    )
    first = AgentEvalListener(evaluator, session_id="first")
    with caplog.at_level("WARNING", logger="agenteval"):
        second = AgentEvalListener(evaluator, session_id="second")
    try:
        crew.kickoff()
        traces = captured_by(second)
    finally:
        first.close()
        second.close()
    # it was: the kickoff captured twice, once under each session, with no word
    assert [(t.session_id, t.input, t.output) for t in traces] == [("second", "Say hi", "hello")]
    assert [r.getMessage() for r in caplog.records if "second AgentEvalListener" in r.getMessage()]


def weather_tool(ran: list[str]) -> Any:
    """A weather tool that notes each city it ran for in ``ran``."""

    @tool("get_weather")
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        ran.append(city)
        return f"sunny in {city}"

    return get_weather


def asks_paris_four_times() -> ScriptedLLM:
    """A function-calling model that asks for Paris's weather four times (ids call_0 to
    call_3), then answers: the guard refuses the third and fourth requests."""
    from agenteval_crewai.testing import native_call

    calls = [[native_call(f"call_{i}", "get_weather", city="Paris")] for i in range(4)]
    return ScriptedLLM(model="gpt-4o", native=True, replies=[*calls, "Paris is sunny."])


def refused_after_two(trace: Trace) -> list[tuple[str | None, Any, bool]]:
    """Each tool span's request id, result and whether the guard refused it."""
    return [
        (s.tool_call.id, s.tool_call.result, bool(s.attributes.get(GUARD_REFUSED)))
        for s in trace.spans
        if s.tool_call is not None
    ]


PARIS_REFUSED_AFTER_TWO = [
    ("call_0", "sunny in Paris", False),
    ("call_1", "sunny in Paris", False),
    ("call_2", None, True),
    ("call_3", None, True),
]


def test_a_refused_call_is_recorded_once_with_its_provider_id(
    evaluator: OnlineEvaluator,
) -> None:
    ran: list[str] = []
    agent = Agent(
        role="forecaster",
        goal="weather",
        backstory="b",
        llm=asks_paris_four_times(),
        tools=[weather_tool(ran)],
    )
    task = Task(description="Weather in Paris?", expected_output="short", agent=agent)
    listener = AgentEvalListener(evaluator, stop_on_loop=True)
    try:
        Crew(agents=[agent], tasks=[task]).kickoff()
        [trace] = captured_by(listener)
    finally:
        listener.close()
    assert ran == ["Paris", "Paris"]  # the third identical request closed the loop
    # one tool span per request, each with the provider's id; the refused ones once (it
    # was: a "blocked by hook" run with the id, and again as a refused span without one)
    assert refused_after_two(trace) == PARIS_REFUSED_AFTER_TWO
    assert trace.status is RunStatus.STOPPED


def test_the_forced_final_answer_at_max_iter_is_in_the_kickoffs_trace(
    evaluator: OnlineEvaluator,
) -> None:
    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        return "shipped"

    forced: list[Any] = []

    def reply(messages: Any) -> str:
        if "MUST give your absolute best final answer" in str(messages[-1]):
            forced.append(messages)
            return "Thought: out of steps\nFinal Answer: A-1 has probably shipped."
        return action("lookup_order", order_id=f"A-{len(messages)}")

    llm = ScriptedLLM(model="scripted", reply=reply)
    agent = Agent(
        role="support",
        goal="answer",
        backstory="b",
        llm=llm,
        tools=[lookup_order],
        max_iter=2,
        verbose=False,
    )
    task = Task(description="Where is A-1?", expected_output="a status", agent=agent)
    listener = AgentEvalListener(evaluator)
    try:
        result = Crew(agents=[agent], tasks=[task]).kickoff(inputs={"session_id": "s-7"})
        traces = captured_by(listener)
    finally:
        listener.close()
    assert result.raw == "A-1 has probably shipped." and len(forced) == 1
    # it was: the forced call a trace of its own (no session, the message list as input),
    # and the kickoff "ok" with 2 of its 3 LLM calls
    [trace] = traces
    assert (trace.status, trace.status_reason, trace.session_id) == (
        RunStatus.LIMIT,
        "support reached max_iter: CrewAI forced a final answer",
        "s-7",
    )
    assert (trace.input, trace.output) == ("Where is A-1?", "A-1 has probably shipped.")
    [agent_span] = [s for s in trace.spans if s.kind is SpanKind.AGENT and s.parent_id]
    llms = trace.spans_of(SpanKind.LLM)
    assert [(s.parent_id, s.attributes["gen_ai.agent.name"]) for s in llms] == [
        (agent_span.id, "support")
    ] * 3
    assert llms[-1].output == "Thought: out of steps\nFinal Answer: A-1 has probably shipped."
    assert llms[-1].input == forced[0]
    assert [c.result for c in trace.tool_calls()] == ["shipped", "shipped"]


@tool("lookup_order")
def failing_lookup(order_id: str) -> str:
    """Status of an order."""
    raise ValueError(f"no order {order_id}")


def _ask_about_z9(evaluator: OnlineEvaluator, llm: ScriptedLLM) -> Trace:
    """The trace of one kickoff whose agent looks up an order that does not exist."""
    agent = Agent(role="support", goal="g", backstory="b", llm=llm, tools=[failing_lookup])
    task = Task(description="Where is Z-9?", expected_output="status", agent=agent)
    listener = AgentEvalListener(evaluator)
    try:
        Crew(agents=[agent], tasks=[task]).kickoff()
        [trace] = captured_by(listener)
    finally:
        listener.close()
    return trace


def test_a_handled_tool_error_has_the_text_the_model_saw_native(
    evaluator: OnlineEvaluator,
) -> None:
    from agenteval_crewai.testing import native_call

    llm = ScriptedLLM(
        model="gpt-4o",
        native=True,
        replies=[[native_call("call_1", "lookup_order", order_id="Z-9")], "No such order."],
    )
    trace = _ask_about_z9(evaluator, llm)
    *_, last_llm = trace.spans_of(SpanKind.LLM)
    [shown] = [m["content"] for m in last_llm.input if m.get("role") == "tool"]
    assert shown == "Error executing tool: no order Z-9"
    # it was: result None, though the model answered from this text
    assert [(c.id, c.arguments, c.result, c.error) for c in trace.tool_calls()] == [
        ("call_1", {"order_id": "Z-9"}, shown, "no order Z-9")
    ]


def test_a_handled_tool_error_has_the_text_the_model_saw_react(
    evaluator: OnlineEvaluator,
) -> None:
    llm = ScriptedLLM(
        model="scripted",
        replies=[action("lookup_order", order_id="Z-9"), "Thought: done\nFinal Answer: none"],
    )
    trace = _ask_about_z9(evaluator, llm)
    first_llm, last_llm = trace.spans_of(SpanKind.LLM)
    [asked] = first_llm.requested_tool_calls
    said = last_llm.input[-2]["content"]
    shown = said.split("Observation:")[1].strip()
    assert shown.startswith(
        "I encountered an error while trying to use the tool. This was the error: no order Z-9."
    )
    # CrewAI ran the one request three times: one id (it was: #0, #1, #2), the retries
    # numbered, the last run holding what the model was shown instead of None
    runs = [s for s in trace.spans if s.tool_call is not None]
    assert [
        (
            s.tool_call.id,
            s.tool_call.result,
            s.tool_call.error,
            s.attributes.get("agenteval.tool.attempt"),
        )
        for s in runs
    ] == [
        (asked.id, None, "no order Z-9", None),
        (asked.id, None, "no order Z-9", 2),
        (asked.id, shown, "no order Z-9", 3),
    ]


def test_an_agents_own_kickoff_is_one_trace_of_its_steps(evaluator: OnlineEvaluator) -> None:
    # Agent.kickoff(): one agent, no crew or task. It was three traces, one per LLM call
    # and tool run, each taking the model's message list as its input and its ReAct text
    # as its output
    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        return {"A-1": "shipped"}[order_id]

    llm = ScriptedLLM(
        model="scripted",
        replies=[action("lookup_order", order_id="A-1"), "Thought: done\nFinal Answer: shipped."],
    )
    agent = Agent(role="support", goal="answer", backstory="b", llm=llm, tools=[lookup_order])
    listener = AgentEvalListener(evaluator)
    try:
        result = agent.kickoff("Where is A-1?")
        [trace] = captured_by(listener)
    finally:
        listener.close()
    assert result.raw == "shipped."
    assert (trace.input, trace.output, trace.status, trace.session_id) == (
        "Where is A-1?",
        "shipped.",
        RunStatus.OK,
        str(agent.id),  # the agent's kickoffs are its session, as a crew's are
    )
    root, first, run, second = trace.spans
    assert [(s.kind, s.name, s.parent_id) for s in trace.spans] == [
        (SpanKind.AGENT, "support", None),
        (SpanKind.LLM, "scripted", root.id),
        (SpanKind.TOOL, "lookup_order", root.id),
        (SpanKind.LLM, "scripted", root.id),
    ]
    assert [(t.name, t.parameters["required"]) for t in trace.tools] == [
        ("lookup_order", ["order_id"])
    ]
    assert root.attributes[AGENT_NAME] == first.attributes[AGENT_NAME] == "support"
    [asked] = first.requested_tool_calls or []
    assert run.tool_call is not None
    assert (asked.id, asked.name, asked.arguments) == (
        run.tool_call.id,
        "lookup_order",
        {"order_id": "A-1"},
    )
    assert (run.tool_call.result, second.output) == (
        "shipped",
        "Thought: done\nFinal Answer: shipped.",
    )


def test_an_agents_own_kickoffs_fail_stop_and_run_side_by_side(
    evaluator: OnlineEvaluator,
) -> None:
    from agenteval_crewai.testing import native_call

    ran: list[str] = []
    get_weather = weather_tool(ran)

    def broken(messages: Any) -> str:
        raise ConnectionError("model endpoint down")

    def forecaster(llm: ScriptedLLM) -> Agent:
        return Agent(role="forecaster", goal="weather", backstory="b", llm=llm, tools=[get_weather])

    listener = AgentEvalListener(evaluator, stop_on_loop=True)
    try:
        forecaster(asks_paris_four_times()).kickoff("Weather in Paris?")
        with pytest.raises(ConnectionError):
            forecaster(ScriptedLLM(model="scripted", reply=broken)).kickoff("Weather in Rome?")

        async def side_by_side() -> None:
            def kickoff(city: str) -> Any:
                call = native_call(f"call_{city}", "get_weather", city=city)
                llm = ScriptedLLM(model="gpt-4o", native=True, replies=[[call], city])
                return forecaster(llm).kickoff_async(f"Weather in {city}?")

            await asyncio.gather(kickoff("Oslo"), kickoff("Lima"))

        asyncio.run(side_by_side())
        stopped, failed, *together = captured_by(listener)
    finally:
        listener.close()
    # the guard refused the third and fourth identical requests of the agent's own kickoff
    assert ran[:2] == ["Paris", "Paris"]
    assert stopped.input == "Weather in Paris?" and stopped.status is RunStatus.STOPPED
    assert refused_after_two(stopped) == PARIS_REFUSED_AFTER_TWO
    assert (failed.input, failed.status) == ("Weather in Rome?", RunStatus.ERROR)
    assert failed.error is not None and "model endpoint down" in failed.error
    # two kickoffs at once, on one event loop: each trace holds its own agent's steps only
    assert sorted(
        (t.input, t.output, [(c.id, c.result) for c in t.tool_calls()]) for t in together
    ) == [
        ("Weather in Lima?", "Lima", [("call_Lima", "sunny in Lima")]),
        ("Weather in Oslo?", "Oslo", [("call_Oslo", "sunny in Oslo")]),
    ]


def test_tasks_run_at_once_keep_each_agents_retries_and_recoveries(
    evaluator: OnlineEvaluator,
) -> None:
    # two async_execution tasks: the refunds agent's lookup raises and CrewAI runs it again
    # twice, while the orders agent calls its model in between. That model call ended the
    # retry (one request read as two failed calls: "2 of 3 tool calls failed"), and the
    # orders agent's lookup, made beside the failure, recovered it; both by how the threads
    # happened to interleave (the events below fix the interleaving that showed it)
    refund_raised, orders_answered = threading.Event(), threading.Event()

    @tool("lookup_refund")
    def lookup_refund(refund_id: str) -> str:
        """Look up a refund."""
        if not refund_raised.is_set():  # its first run: the orders agent goes on meanwhile
            refund_raised.set()
            assert orders_answered.wait(10)
        raise ValueError(f"refund {refund_id} unknown")

    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return f"order {order_id}: shipped"

    asked: list[Any] = []

    def orders_model(messages: Any) -> str:
        asked.append(messages)
        if len(asked) == 1:
            assert refund_raised.wait(10)  # its lookup starts after the refund's first run
            return action("lookup_order", order_id="A-1")
        orders_answered.set()  # its model call has started: the refund's retries follow
        return "Thought: done\nFinal Answer: A-1 shipped"

    def agent(role: str, llm: ScriptedLLM, tools: list[Any]) -> Agent:
        return Agent(role=role, goal="g", backstory="b", llm=llm, tools=tools, verbose=False)

    orders = agent("orders", ScriptedLLM(model="scripted", reply=orders_model), [lookup_order])
    refund_replies = [
        action("lookup_refund", refund_id="R-9"),
        "Thought: done\nFinal Answer: R-9 is pending",
    ]
    refunds = agent(
        "refunds", ScriptedLLM(model="scripted", replies=refund_replies), [lookup_refund]
    )
    summary = "Thought: done\nFinal Answer: A-1 shipped; R-9 pending"
    writer = agent("writer", ScriptedLLM(model="scripted", replies=[summary]), [])
    order_task = Task(description="Where is A-1?", expected_output="x", agent=orders)
    refund_task = Task(description="Where is R-9?", expected_output="x", agent=refunds)
    for task in (order_task, refund_task):
        task.async_execution = True
    sum_up = Task(
        description="Sum up", expected_output="x", agent=writer, context=[order_task, refund_task]
    )
    crew = Crew(agents=[orders, refunds, writer], tasks=[order_task, refund_task, sum_up])
    listener = AgentEvalListener(evaluator)
    try:
        assert str(crew.kickoff()) == "A-1 shipped; R-9 pending"
        [trace] = captured_by(listener)
    finally:
        listener.close()
    steps = [
        (span.kind, span.attributes.get(AGENT_NAME), span.name)
        for span in trace.spans
        if span.kind in (SpanKind.LLM, SpanKind.TOOL)
    ]
    refund = (SpanKind.TOOL, "refunds", "lookup_refund")
    first, last = steps.index(refund), len(steps) - 1 - steps[::-1].index(refund)
    # the interleaving it is about: the refund's first run, the orders agent's lookup and
    # last model call, then the refund's retries
    assert steps.count(refund) == 3
    assert [step for step in steps[first:last] if step[1] == "orders"][-2:] == [
        (SpanKind.TOOL, "orders", "lookup_order"),
        (SpanKind.LLM, "orders", "scripted"),
    ]
    [asked_refund] = [
        span.tool_call for span in trace.spans if span.tool_call and span.name == "lookup_refund"
    ][:1]
    [asked_order] = [span.tool_call for span in trace.spans if span.name == "lookup_order"]
    # one request, run three times: one call, judged by its last run
    assert [(c.name, c.id, c.arguments, c.error) for c in trace.tool_calls()] == [
        ("lookup_refund", asked_refund.id, {"refund_id": "R-9"}, "refund R-9 unknown"),
        ("lookup_order", asked_order.id, {"order_id": "A-1"}, None),
    ]
    result = ToolFailures().measure(trace)
    # 1 of 2 calls failed, not recovered (the orders lookup ran beside it; neither answer
    # says the refund failed): 1 − (1 + 1) / 4
    assert (result.score, result.reason) == (
        0.5,
        "1 of 2 tool calls failed (lookup_refund), 1 not recovered (the framework ran a call "
        "again 2 times: each call counts as its last run)",
    )


def pollers_in_tasks_run_at_once(polls: dict[str, int]) -> Crew:
    """A crew whose ``async_execution`` tasks each have a poller check its own job
    ``polls[J]`` times (native tool calls), the checks in turn (A, B, A, B, ...) once every
    poller has called its model; a writer sums up."""
    turns = TakingTurns(polls)

    @tool("job_status")
    def job_status(job: str) -> str:
        """Status of a deploy job."""
        return turns.checked(job)

    def poller(job: str) -> Agent:
        asked_before = [0]

        def reply(messages: Any) -> Any:
            done, asked_before[0] = asked_before[0], asked_before[0] + 1
            check = turns.next_check(job, done)
            if check is None:
                return f"{job} is done"
            return [native_call(check, "job_status", job=job)]

        llm = ScriptedLLM(model="scripted", native=True, reply=reply)
        return Agent(role=f"poller {job}", goal="g", backstory="b", llm=llm, tools=[job_status])

    pollers = [poller(job) for job in polls]
    watches = [
        Task(description=f"Watch {job}", expected_output="x", agent=agent, async_execution=True)
        for job, agent in zip(polls, pollers, strict=True)
    ]
    writer = Agent(
        role="writer", goal="g", backstory="b", llm=ScriptedLLM(model="s", replies=["All done."])
    )
    sum_up = Task(description="Sum up", expected_output="x", agent=writer, context=watches)
    return Crew(agents=[*pollers, writer], tasks=[*watches, sum_up])


@pytest.mark.parametrize("stop_on_loop", [True, False])
def test_pollers_in_tasks_run_at_once_are_not_a_loop_and_one_that_loops_is(
    evaluator: OnlineEvaluator, stop_on_loop: bool
) -> None:
    # two async_execution tasks, each polling its own job twice: read as one sequence their
    # calls closed "cycle job_status → job_status", and stop_on_loop=True refused the second
    # poller's last check
    listener = AgentEvalListener(evaluator, stop_on_loop=stop_on_loop)
    try:
        assert str(pollers_in_tasks_run_at_once({"A": 2, "B": 2}).kickoff()) == "All done."
        looping = pollers_in_tasks_run_at_once({"A": 4, "B": 2})  # A checks a third time
        assert str(looping.kickoff()) == "All done."
        worked, looped = captured_by(listener)
    finally:
        listener.close()
    alert = assert_each_poller_loops_alone(worked, looped, stopped=stop_on_loop)
    assert (alert.pattern, [c.arguments for c in alert.calls]) == (
        "repeated_call",
        [{"job": "A"}] * 3,
    )


def test_one_agent_kicked_off_on_two_threads_at_once_keeps_each_runs_steps(
    evaluator: OnlineEvaluator,
) -> None:
    # one Agent object serving two requests at once (a web server's threads): the agent
    # keeps only its last kickoff's id, so the steps of both went to whichever kickoff was
    # bound first, and the guard counted both runs' calls as the later kickoff's: two users
    # asking the same thing twice each read as one run asking four times, and was stopped
    from agenteval_crewai.testing import native_call

    ran: list[str] = []
    first_waiting, second_asked = threading.Event(), threading.Event()

    class TakesTurns(ScriptedLLM):
        """The first request's first model call starts only after the second's."""

        def call(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            if "(user a)" in str(messages) and not second_asked.is_set():
                first_waiting.set()
                second_asked.wait(10)
            reply = super().call(messages, *args, **kwargs)
            if "(user b)" in str(messages):
                second_asked.set()
            return reply

    def reply(messages: Any) -> Any:
        user = "a" if "(user a)" in str(messages) else "b"
        answered = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")
        if answered < 2:
            return [native_call(f"call_{user}{answered}", "get_weather", city="Paris")]
        return f"Paris is sunny ({user})."

    llm = TakesTurns(model="gpt-4o", native=True, reply=reply)
    agent = Agent(
        role="forecaster", goal="weather", backstory="b", llm=llm, tools=[weather_tool(ran)]
    )
    listener = AgentEvalListener(evaluator, stop_on_loop=True)
    answers: dict[str, str] = {}

    def kickoff(user: str) -> None:
        answers[user] = agent.kickoff(f"Weather in Paris? (user {user})").raw

    try:
        first = threading.Thread(target=kickoff, args=("a",))
        first.start()
        assert first_waiting.wait(10)  # the first kickoff has started
        second = threading.Thread(target=kickoff, args=("b",))
        second.start()
        first.join(30)
        second.join(30)
        traces = captured_by(listener)
    finally:
        listener.close()
    assert answers == {"a": "Paris is sunny (a).", "b": "Paris is sunny (b)."}
    assert ran == ["Paris"] * 4  # no call refused
    assert sorted(
        (
            t.input,
            t.output,
            t.status,
            [(c.id, c.name, c.arguments, c.result) for c in t.tool_calls()],
            [a.pattern for a in t.alerts],
        )
        for t in traces
    ) == [
        (
            f"Weather in Paris? (user {user})",
            f"Paris is sunny ({user}).",
            RunStatus.OK,
            [
                (f"call_{user}{i}", "get_weather", {"city": "Paris"}, "sunny in Paris")
                for i in range(2)
            ],
            [],
        )
        for user in ("a", "b")
    ]


def _tree(trace: Trace) -> list[tuple[str, str, str | None, Any, str | None, Any]]:
    """Each span as (kind, name, its parent's name, output, error, guardrail attempt)."""
    names = {s.id: s.name for s in trace.spans}
    return [
        (
            s.kind.value,
            s.name,
            names.get(s.parent_id or ""),
            s.output,
            s.error,
            s.attributes.get("agenteval.guardrail.attempt"),
        )
        for s in trace.spans
    ]


def test_a_tasks_llm_guardrail_is_a_check_inside_the_kickoff(evaluator: OnlineEvaluator) -> None:
    # an LLMGuardrail asks an agent of its own (Agent.kickoff) whether the answer passes:
    # each check was a trace of its own in the crew's session, scored as a run of the
    # agent, and the rejection that sent the task back to the agent was nowhere
    from crewai.tasks.llm_guardrail import LLMGuardrail

    rejected = 'Thought: checked\nFinal Answer: {"valid": false, "feedback": "name the order"}'
    passed = 'Thought: checked\nFinal Answer: {"valid": true, "feedback": null}'
    judge = ScriptedLLM(model="judge", replies=[rejected, passed])
    llm = ScriptedLLM(
        model="scripted",
        replies=[
            "Thought: done\nFinal Answer: shipped",
            "Thought: done\nFinal Answer: A-1 shipped.",
        ],
    )
    agent = Agent(role="support", goal="answer", backstory="b", llm=llm)
    task = Task(
        description="Where is A-1?",
        expected_output="its status",
        agent=agent,
        guardrail=LLMGuardrail(description="The answer names the order", llm=judge),
    )
    listener = AgentEvalListener(evaluator, session_id="user-1")
    try:
        result = Crew(agents=[agent], tasks=[task]).kickoff()
        [trace] = captured_by(listener)
    finally:
        listener.close()
    assert result.raw == "A-1 shipped."
    assert (trace.input, trace.output, trace.status, trace.session_id) == (
        "Where is A-1?",
        "A-1 shipped.",
        RunStatus.OK,
        "user-1",
    )
    check = "guardrail: The answer names the order"
    assert _tree(trace) == [
        ("agent", "crew", None, "A-1 shipped.", None, None),
        ("task", "Where is A-1?", "crew", "A-1 shipped.", None, None),
        ("agent", "support", "Where is A-1?", "shipped", None, None),
        ("llm", "scripted", "support", "Thought: done\nFinal Answer: shipped", None, None),
        (
            "chain",
            check,
            "Where is A-1?",
            None,
            "name the order",
            1,
        ),
        (
            "agent",
            "Guardrail Agent",
            check,
            '{"valid": false, "feedback": "name the order"}',
            None,
            None,
        ),
        ("llm", "judge", "Guardrail Agent", rejected, None, None),
        ("agent", "support", "Where is A-1?", "A-1 shipped.", None, None),
        ("llm", "scripted", "support", "Thought: done\nFinal Answer: A-1 shipped.", None, None),
        ("chain", check, "Where is A-1?", "A-1 shipped.", None, 2),
        (
            "agent",
            "Guardrail Agent",
            check,
            '{"valid": true, "feedback": null}',
            None,
            None,
        ),
        ("llm", "judge", "Guardrail Agent", passed, None, None),
    ]
    # the agent the guardrail asks is CrewAI's: its calls are no steps of the run
    assert [s.attributes.get(INTERNAL_CALL) for s in trace.spans if s.name == check] == [True, True]
    assert [(step.output, step.tool_calls) for step in trace.steps()] == [
        ("Thought: done\nFinal Answer: shipped", []),
        ("Thought: done\nFinal Answer: A-1 shipped.", []),
    ]


def test_an_agents_guardrail_retry_stays_in_its_kickoffs_trace(
    evaluator: OnlineEvaluator,
) -> None:
    # Agent(guardrail=...).kickoff(): a rejected answer runs the agent's executor again, in
    # a new flow; its steps became a trace of their own (the message list as its input)
    def names_the_order(output: Any) -> tuple[bool, Any]:
        named = "A-1" in output.raw
        return named, output.raw if named else "the answer must name the order"

    llm = ScriptedLLM(
        model="scripted",
        replies=[
            "Thought: done\nFinal Answer: shipped",
            "Thought: done\nFinal Answer: A-1 shipped.",
        ],
    )
    agent = Agent(role="support", goal="answer", backstory="b", llm=llm, guardrail=names_the_order)
    listener = AgentEvalListener(evaluator)
    try:
        assert agent.kickoff("Where is A-1?").raw == "A-1 shipped."
        [trace] = captured_by(listener)
    finally:
        listener.close()
    assert (trace.input, trace.output, trace.status) == (
        "Where is A-1?",
        "A-1 shipped.",
        RunStatus.OK,
    )
    check = "guardrail: names_the_order"
    assert _tree(trace) == [
        ("agent", "support", None, "A-1 shipped.", None, None),
        ("llm", "scripted", "support", "Thought: done\nFinal Answer: shipped", None, None),
        ("chain", check, "support", None, "the answer must name the order", 1),
        ("llm", "scripted", "support", "Thought: done\nFinal Answer: A-1 shipped.", None, None),
        ("chain", check, "support", "A-1 shipped.", None, 2),
    ]


def test_a_planned_crews_request_is_its_first_task_not_the_planners(
    evaluator: OnlineEvaluator,
) -> None:
    # Crew(planning=True) runs a planner's task first and appends each plan to its task's
    # description: a kickoff without inputs took the planner's prompt as its request
    plans = {"list_of_plans_per_task": [{"task_number": 1, "task": "A-1", "plan": " Use the API."}]}

    def reply(messages: Any) -> str:
        if "Task Execution Planner" in str(messages):
            return f"Thought: planned\nFinal Answer: {json.dumps(plans)}"
        return "Thought: done\nFinal Answer: A-1 shipped."

    llm = ScriptedLLM(model="scripted", reply=reply)
    agent = Agent(role="support", goal="answer", backstory="b", llm=llm)
    task = Task(description="Where is A-1?", expected_output="its status", agent=agent)
    listener = AgentEvalListener(evaluator)
    try:
        crew = Crew(agents=[agent], tasks=[task], planning=True, planning_llm=llm)
        assert crew.kickoff().raw == "A-1 shipped."
        [trace] = captured_by(listener)
    finally:
        listener.close()
    assert (trace.input, trace.output) == ("Where is A-1?", "A-1 shipped.")
    tasks = [(s.input, s.parent_id) for s in trace.spans if s.kind is SpanKind.TASK]
    assert len(tasks) == 2 and tasks[0][0].startswith("Based on these tasks summary")
    # the agent was given the plan with the task; the task's span says so
    assert tasks[1] == ("Where is A-1? Use the API.", trace.spans[0].id)


def test_a_model_called_in_a_flow_step_is_a_step_of_the_flows_run_in_its_session(
    evaluator: OnlineEvaluator,
) -> None:
    # llm.call(...) in a Flow step, outside any agent: a step of the flow's run, whose
    # request (the flow was given no inputs) is what the model was asked, in the
    # listener's session or that of agenteval_core.session(...)
    from crewai.flow.flow import Flow, start

    class Summarise(Flow[Any]):
        @start()
        def summarise(self) -> Any:
            llm = ScriptedLLM(model="scripted", replies=["A-1 shipped on Monday."])
            return llm.call([{"role": "user", "content": "Summarise: A-1 shipped Monday"}])

    listener = AgentEvalListener(evaluator, session_id="user-1")
    try:
        assert Summarise().kickoff() == "A-1 shipped on Monday."
        with session("support-chat-7"):
            Summarise().kickoff()
        traces = captured_by(listener)
    finally:
        listener.close()
    asked = [{"role": "user", "content": "Summarise: A-1 shipped Monday"}]
    assert sorted(
        (t.session_id, t.input, t.output, [(s.kind.value, s.name) for s in t.spans]) for t in traces
    ) == [
        (
            session_id,
            asked,
            "A-1 shipped on Monday.",
            [("agent", "Summarise"), ("chain", "summarise"), ("llm", "scripted")],
        )
        for session_id in ("support-chat-7", "user-1")
    ]


def research_then_write(fails: bool = False) -> Any:
    """A Flow that kicks off a research crew, then a writing crew given its facts (the
    writer's model down when ``fails``), and returns the report."""
    from crewai.flow.flow import Flow, listen, start

    def crew(role: str, llm: ScriptedLLM) -> Crew:
        agent = Agent(role=role, goal="g", backstory="b", llm=llm)
        task = Task(description=f"{role}: {{topic}}", expected_output="x", agent=agent)
        return Crew(agents=[agent], tasks=[task])

    def down(messages: Any) -> str:
        raise ConnectionError("model endpoint down")

    class Report(Flow[Any]):
        @start()
        def research(self) -> str:
            llm = ScriptedLLM(model="scripted", replies=["Final Answer: A-1 left on Monday."])
            return str(crew("researcher", llm).kickoff(inputs={"topic": self.state["topic"]}))

        @listen(research)
        def write(self, facts: str) -> str:
            llm = ScriptedLLM(
                model="scripted", reply=down if fails else lambda _: f"Final Answer: {facts}"
            )
            return "Report: " + str(crew("writer", llm).kickoff(inputs={"topic": facts}))

    return Report()


def test_a_flows_methods_are_each_others_work_and_one_run_again_is_a_step_on(
    evaluator: OnlineEvaluator,
) -> None:
    # three listeners of one start method, each kicking off a crew that reads the style
    # guide once: the flow's run read "style_guide called 3 times" (an alert, and
    # tool_call_loops 0.0) unless their crews' agents happened to run at the same moment.
    # A method a router sends the run back to, on the same input, does its work again
    from crewai.flow.flow import Flow, listen, or_, router, start

    def one_call_crew_of(role: str, tool_used: Any, **arguments: Any) -> Crew:
        llm = ScriptedLLM(
            model="scripted",
            replies=[action(tool_used.name, **arguments), "Thought: done\nFinal Answer: ok"],
        )
        agent = Agent(role=role, goal="g", backstory="b", llm=llm, tools=[tool_used])
        return Crew(
            agents=[agent], tasks=[Task(description=f"{role}", expected_output="x", agent=agent)]
        )

    @tool("style_guide")
    def style_guide(part: str) -> str:
        """The house style guide."""
        return "Short sentences."

    @tool("job_status")
    def job_status(job: str) -> str:
        """A deploy job's status."""
        return "running"

    class Sections(Flow[Any]):
        @start()
        def plan(self) -> str:
            return "three sections"

        @listen(plan)
        def intro(self) -> str:
            return str(one_call_crew_of("intro", style_guide, part="all").kickoff())

        @listen(plan)
        def body(self) -> str:
            return str(one_call_crew_of("body", style_guide, part="all").kickoff())

        @listen(plan)
        def outro(self) -> str:
            return str(one_call_crew_of("outro", style_guide, part="all").kickoff())

    class Poll(Flow[dict[str, Any]]):
        @start()
        def begin(self) -> None:
            self.state["checks"] = 0

        @listen(or_(begin, "again"))
        def check(self) -> str:
            return str(one_call_crew_of("checker", job_status, job="J1").kickoff())

        @router(check)
        def route(self) -> str:
            self.state["checks"] += 1
            return "again" if self.state["checks"] < 3 else "done"

    alerts: list[LoopAlert] = []
    evaluator.engine.sinks.append(CallbackSink(on_alert=alerts.append))
    listener = AgentEvalListener(evaluator)
    try:
        Sections().kickoff()
        Poll().kickoff()
        sections, poll = captured_by(listener)
    finally:
        listener.close()
    steps = {
        s.name: s.attributes.get(GRAPH_STEP) for s in sections.spans if s.kind is SpanKind.CHAIN
    }
    assert steps == {"plan": 0, "intro": 0, "body": 0, "outro": 0}
    assert (sections.alerts, ToolCallLoops().measure(sections).score) == ([], 1.0)
    checks = [s.attributes.get(GRAPH_STEP) for s in poll.spans if s.name == "check"]
    assert checks == [0, 1, 2]
    message = 'job_status called 3 times with the same arguments {"job": "J1"}'
    assert [a.message for a in alerts] == [a.message for a in poll.alerts] == [message]
    assert ToolCallLoops().measure(poll).score == 0.0


def test_a_flow_is_one_run_of_its_crews(evaluator: OnlineEvaluator) -> None:
    # a Flow that kicks off two crews: each crew was a run of its own, in a session of its
    # own (the crew's id), and nothing held the flow's request or its report
    listener = AgentEvalListener(evaluator)
    try:
        flow = research_then_write()
        report = flow.kickoff(inputs={"topic": "order A-1"})
        assert report == "Report: A-1 left on Monday."
        with pytest.raises(ConnectionError):
            research_then_write(fails=True).kickoff(inputs={"topic": "order B-2"})
        given_no_inputs = research_then_write()
        given_no_inputs.state["topic"] = "order C-3"
        given_no_inputs.kickoff()
        worked, failed, unasked = captured_by(listener)
    finally:
        listener.close()
    # a flow kicked off without inputs: what its first crew was asked
    assert (unasked.input, unasked.output) == (
        {"topic": "order C-3"},
        "Report: A-1 left on Monday.",
    )
    assert (worked.input, worked.output, worked.session_id, worked.status) == (
        {"topic": "order A-1"},
        "Report: A-1 left on Monday.",
        flow.flow_id,
        RunStatus.OK,
    )
    by_id = {span.id: span for span in worked.spans}
    assert [
        (s.kind.value, s.name, by_id[s.parent_id].name if s.parent_id else None, s.input, s.output)
        for s in worked.spans
        if s.kind is not SpanKind.LLM
    ] == [
        ("agent", "Report", None, {"topic": "order A-1"}, "Report: A-1 left on Monday."),
        ("chain", "research", "Report", None, "A-1 left on Monday."),
        ("agent", "crew", "research", {"topic": "order A-1"}, "A-1 left on Monday."),
        ("task", "researcher: order A-1", "crew", "researcher: order A-1", "A-1 left on Monday."),
        ("agent", "researcher", "researcher: order A-1", ANY, "A-1 left on Monday."),
        # CrewAI names a method's positional arguments by place
        ("chain", "write", "Report", {"_0": "A-1 left on Monday."}, "Report: A-1 left on Monday."),
        ("agent", "crew", "write", {"topic": "A-1 left on Monday."}, "A-1 left on Monday."),
        (
            "task",
            "writer: A-1 left on Monday.",
            "crew",
            "writer: A-1 left on Monday.",
            "A-1 left on Monday.",
        ),
        ("agent", "writer", "writer: A-1 left on Monday.", ANY, "A-1 left on Monday."),
    ]
    # the writer's model down: the flow's run failed, with the error, in the flow's steps
    assert (failed.input, failed.status) == ({"topic": "order B-2"}, RunStatus.ERROR)
    # the exception as every adapter records a run's: its type said (it was the text alone)
    assert (failed.error, failed.status_reason) == ("ConnectionError: model endpoint down",) * 2
    assert [s.name for s in failed.spans if s.kind is SpanKind.CHAIN] == ["research", "write"]


def test_a_crew_a_flow_kicks_off_leaves_nothing_in_the_guard(evaluator: OnlineEvaluator) -> None:
    # with stop_on_loop=True the guard checks a crew's calls by its kickoff, and forgot
    # only runs' roots: each crew a flow kicked off (a server's every request) stayed held
    from crewai.flow.flow import Flow, start

    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return f"{order_id}: shipped"

    class Support(Flow[Any]):
        @start()
        def answer(self) -> str:
            return str(one_call_crew(lookup_order, "A-1 has shipped.").kickoff())

    listener = AgentEvalListener(evaluator, stop_on_loop=True)
    try:
        for _ in range(3):
            assert Support().kickoff() == "A-1 has shipped."
        traces = captured_by(listener)
    finally:
        listener.close()
    assert [[c.arguments for c in t.tool_calls()] for t in traces] == [[{"order_id": "A-1"}]] * 3
    assert len(evaluator.recorder.guard) == 0


def reviewer(answer: str | None) -> Any:
    """A ``@human_feedback`` provider whose reviewer answers ``answer`` at once, or, given
    None, later: the flow pauses (``kickoff()`` returns ``HumanFeedbackPending``)."""
    from crewai.flow.async_feedback import HumanFeedbackPending, HumanFeedbackProvider

    class Reviewer(HumanFeedbackProvider):
        def request_feedback(self, context: Any, flow: Any) -> Any:
            if answer is None:
                raise HumanFeedbackPending(context=context)
            return answer

    return Reviewer()


def test_a_humans_feedback_given_while_a_flow_runs_is_what_a_judge_is_told(
    evaluator: OnlineEvaluator,
) -> None:
    # @human_feedback answered by its provider while the flow ran: the reviewer halved the
    # refund, and a judge of the run saw only the request and "refunded 20 EUR"
    from crewai.flow.flow import Flow, listen, start
    from crewai.flow.human_feedback import human_feedback

    class Review(Flow[Any]):
        @start()
        @human_feedback(
            message="Approve the refund for A-1?", provider=reviewer("no, refund 20 EUR only")
        )
        def draft(self) -> str:
            return "Refund A-1: 40 EUR"

        @listen(draft)
        def refund(self, review: Any) -> str:
            return "refunded 20 EUR" if "20" in review.feedback else "refunded 40 EUR"

    listener = AgentEvalListener(evaluator)
    try:
        assert Review().kickoff(inputs={"order": "A-1"}) == "refunded 20 EUR"
        [run] = captured_by(listener)
    finally:
        listener.close()
    assert (run.status, run.output, run.metadata) == (
        RunStatus.OK,
        "refunded 20 EUR",
        {"human_answers": ["no, refund 20 EUR only"]},
    )
    assert describe_trace(EvalCase.of(run)).splitlines() == [
        'user input: {"order": "A-1"}',
        "a human answered while the run went on: no, refund 20 EUR only",
        "final answer: refunded 20 EUR",
    ]


def test_what_a_flow_asks_and_is_answered_is_the_humans_answer(
    evaluator: OnlineEvaluator,
) -> None:
    # a flow's ask(): which order and how much were the human's to say; the trace kept
    # neither, and a judge saw "refunded 20 EUR on A-1" answer no request at all
    from crewai.flow.flow import Flow, listen, start

    class Answers:
        def request_input(self, message: str, flow: Any, metadata: Any = None) -> str | None:
            return {"Which order?": "A-1", "How much?": "20 EUR"}.get(message)

    class Refund(Flow[Any]):
        @start()
        def which(self) -> str | None:
            return self.ask("Which order?")

        @listen(which)
        def how_much(self, order: str) -> str:
            unasked = self.ask("Anything else?")  # no answer: the provider gave None
            return f"refunded {self.ask('How much?')} on {order}" + (unasked or "")

    listener = AgentEvalListener(evaluator)
    try:
        flow = Refund()
        flow.input_provider = Answers()
        assert flow.kickoff() == "refunded 20 EUR on A-1"
        [run] = captured_by(listener)
    finally:
        listener.close()
    assert (run.status, run.metadata) == (
        RunStatus.OK,
        {"human_answers": ["A-1", "20 EUR"], "human_questions": ["Which order?", "How much?"]},
    )
    # a judge is told what each answer answered: "A-1" and "20 EUR" alone say little
    assert describe_trace(EvalCase.of(run)).splitlines()[1:3] == [
        'a human was asked "Which order?" while the run went on, and answered: A-1',
        'a human was asked "How much?" while the run went on, and answered: 20 EUR',
    ]


def test_feedback_a_model_routes_is_the_humans_answer_and_no_request_or_step(
    evaluator: OnlineEvaluator,
) -> None:
    # @human_feedback(emit=...): CrewAI asks a model which outcome the feedback means. That
    # call was a step of the run and, for a flow kicked off without inputs, its request
    # ("Based on the following human feedback, ..."); the human's answer was kept nowhere
    from crewai.flow.flow import Flow, listen, start
    from crewai.flow.human_feedback import human_feedback

    router = ScriptedLLM(model="scripted", replies=["approved"])

    class Review(Flow[Any]):
        @start()
        @human_feedback(
            message="Approve?",
            provider=reviewer("looks good, go ahead"),
            emit=["approved", "rejected"],
            llm=router,
        )
        def draft(self) -> str:
            return "Refund A-1: 40 EUR"

        @listen("approved")
        def refund(self) -> str:
            return "refunded 40 EUR"

    listener = AgentEvalListener(evaluator)
    try:
        assert Review().kickoff() == "refunded 40 EUR"
        [run] = captured_by(listener)
    finally:
        listener.close()
    assert (run.input, run.output, run.metadata) == (
        None,
        "refunded 40 EUR",
        {"human_answers": ["looks good, go ahead"]},
    )
    [routing] = run.spans_of(SpanKind.LLM)
    assert (routing.output, routing.attributes[INTERNAL_CALL]) == ("approved", True)
    assert run.steps() == []


@pytest.mark.parametrize("recorder_behind", [False, True])
def test_a_flow_paused_for_a_human_is_an_interrupted_run_its_resume_goes_on_from(
    evaluator: OnlineEvaluator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    recorder_behind: bool,
) -> None:
    # @human_feedback with a provider that answers later: kickoff() returns, paused; the
    # run's trace ends there, waiting for the human, not open until the process exits. The
    # run resume() made had no request, no link to the paused run and not the human's answer.
    # With the recorder behind (a loaded machine: it reads the resumed flow's start only
    # once resume() has returned), the flow had kept the answer and was no longer pending
    # when its start was read: the answer was missed, or the link and the request (seen in
    # a full run of the suite)
    from agenteval_crewai._translate import Translator
    from crewai.flow.async_feedback import HumanFeedbackPending
    from crewai.flow.flow import Flow, listen, start
    from crewai.flow.human_feedback import human_feedback
    from crewai.flow.persistence import SQLiteFlowPersistence

    resumed_returned = threading.Event()
    handle, starts = Translator.handle, []

    def behind(translator: Translator, event: Any) -> None:
        if type(event.event).__name__ == "FlowStartedEvent":
            starts.append(event)
            if recorder_behind and len(starts) == 2:  # the resumed flow's start
                assert resumed_returned.wait(20)
        handle(translator, event)

    monkeypatch.setattr(Translator, "handle", behind)

    class Review(Flow[Any]):
        @start()
        @human_feedback(message="Approve the refund for A-1?", provider=reviewer(None))
        def draft(self) -> str:
            return "Refund A-1: 40 EUR"

        @listen(draft)
        def refund(self, review: Any) -> str:
            return f"{review.output}: {review.feedback}"

    listener = AgentEvalListener(evaluator)
    try:
        persistence = SQLiteFlowPersistence(db_path=str(tmp_path / "flows.db"))
        flow = Review(persistence=persistence)
        assert isinstance(flow.kickoff(inputs={"order": "A-1"}), HumanFeedbackPending)
        resumed_flow = Review.from_pending(flow.flow_id, persistence)
        assert resumed_flow.resume("approved") == "Refund A-1: 40 EUR: approved"
        resumed_returned.set()
        paused, resumed = captured_by(listener)
    finally:
        listener.close()
    assert (paused.input, paused.status, paused.status_reason, paused.session_id) == (
        {"order": "A-1"},
        RunStatus.INTERRUPTED,
        "the flow waits for a human: Approve the refund for A-1?",
        flow.flow_id,
    )
    assert [(s.kind, s.name, s.error) for s in paused.spans] == [
        (SpanKind.AGENT, "Review", None),
        (SpanKind.CHAIN, "draft", None),
    ]
    # the resumed run: the paused run's request, in its session, linked to it, with the answer
    assert (resumed.input, resumed.output, resumed.status, resumed.session_id) == (
        {"order": "A-1"},
        "Refund A-1: 40 EUR: approved",
        RunStatus.OK,
        flow.flow_id,
    )
    assert resumed.metadata == {"resumes_trace_id": paused.id, "resume": "approved"}
    assert [(s.kind, s.name) for s in resumed.spans] == [
        (SpanKind.AGENT, "Review"),
        (SpanKind.CHAIN, "draft"),  # the review it went on from
        (SpanKind.CHAIN, "refund"),
    ]
    # what a judge of the resumed run is told
    assert "the run resumed after a pause for a human, who answered: approved\n" in (
        describe_trace(EvalCase(input="", trace=resumed))
    )


@pytest.mark.parametrize(
    ("finish_reason", "status", "status_reason"),
    [
        (
            "length",
            RunStatus.LIMIT,
            "the answer was cut at the model's output token limit (finish reason length)",
        ),
        ("stop", RunStatus.OK, None),
    ],
)
def test_an_answer_cut_at_the_token_limit_is_no_completed_run(
    evaluator: OnlineEvaluator,
    judge_server: JudgeServer,
    finish_reason: str,
    status: RunStatus,
    status_reason: str | None,
) -> None:
    # CrewAI's own OpenAI provider, over HTTP: a final answer cut mid-sentence at the
    # model's output token limit read as a completed run, its half answer scored as the answer
    answer = "A-1 has shipped and should"
    judge_server.script.append(
        Reply(content=f"Thought: I know.\nFinal Answer: {answer}", finish_reason=finish_reason)
    )
    llm = LLM(model="openai/gpt-4o-mini", base_url=judge_server.base_url, api_key="k")
    trace = support_run(evaluator, llm, "Where is A-1?", answer)
    [model_call] = trace.spans_of(SpanKind.LLM)
    assert model_call.attributes["gen_ai.response.finish_reasons"] == [finish_reason]
    assert (model_call.attributes["gen_ai.usage.input_tokens"], model_call.output) == (
        100,
        f"Thought: I know.\nFinal Answer: {answer}",
    )
    assert (trace.status, trace.status_reason, trace.output) == (status, status_reason, answer)
    assert len(judge_server.requests) == 1


def _shipped_lookup() -> Any:
    """An order lookup tool that finds every order shipped."""

    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        return "shipped"

    return lookup_order


def _ask_for_a1(native: bool, call_id: str, name: str) -> Any:
    """A model reply asking for tool ``name`` on order A-1, natively or in ReAct text."""
    if native:
        return [native_call(call_id, name, order_id="A-1")]
    return action(name, order_id="A-1")


@pytest.mark.parametrize("native", [True, False])
def test_a_call_of_a_tool_the_agent_does_not_have_is_a_failed_call(
    evaluator: OnlineEvaluator, native: bool
) -> None:
    # CrewAI answers a call of a tool the agent does not have without running one: with
    # native calling the call read as a success ("Tool not found" as its result); with
    # ReAct no tool event came at all (only a selection error, several per request), so the
    # trace had no such call and tool_failures passed the run
    lookup_order = _shipped_lookup()
    llm = ScriptedLLM(
        model="scripted",
        native=native,
        replies=[
            _ask_for_a1(native, "c1", "track_parcel"),
            _ask_for_a1(native, "c2", "track_parcel"),
            _ask_for_a1(native, "c3", "lookup_order"),
            "A-1 has shipped." if native else "Thought: done\nFinal Answer: A-1 has shipped.",
        ],
    )
    agent = Agent(
        role="support", goal="answer", backstory="b", llm=llm, tools=[lookup_order], verbose=False
    )
    crew = Crew(
        agents=[agent], tasks=[Task(description="Where is A-1?", expected_output="x", agent=agent)]
    )
    listener = AgentEvalListener(evaluator)
    try:
        assert str(crew.kickoff()) == "A-1 has shipped."
        [trace] = captured_by(listener)
    finally:
        listener.close()
    requested = [c.id for s in trace.spans_of(SpanKind.LLM) for c in s.requested_tool_calls]
    assert len(requested) == 3
    calls = trace.tool_calls()
    # one call per request, each with the id and arguments the model gave
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        (requested[0], "track_parcel", {"order_id": "A-1"}),
        (requested[1], "track_parcel", {"order_id": "A-1"}),
        (requested[2], "lookup_order", {"order_id": "A-1"}),
    ]
    if native:
        assert [(c.result, c.error) for c in calls] == [
            ("Tool not found", "Tool not found"),
            ("Tool not found", "Tool not found"),
            ("shipped", None),
        ]
    else:
        for call in calls[:2]:
            assert str(call.error).startswith("Action 'track_parcel' don't exist, these are")
            # what the model was shown: CrewAI's observation
            assert str(call.result).startswith("I encountered an error: Action 'track_parcel'")
        assert (calls[2].result, calls[2].error) == ("shipped", None)
    # two failed calls, each followed by a call of another tool: 1 - 2 / (2 * 3)
    failures = ToolFailures().measure(trace)
    assert failures.score == pytest.approx(2 / 3)
    assert [(f["name"], f["recovered"]) for f in failures.metadata["failures"]] == [
        ("track_parcel", True),
        ("track_parcel", True),
    ]
    # no tool ran for them: the regression case of the run had required track_parcel to
    # be called and to succeed, which no fix of the agent can do
    assert [
        s.attributes.get(TOOL_NOT_RUN) for s in trace.spans_of(SpanKind.TOOL) if s.tool_call
    ] == [True, True, None]
    case = regression_case(evaluator)
    assert (case.metrics, case.tools_must_succeed, case.provenance.failed_tools) == (
        ["tool_failures"],
        None,
        [],
    )


@pytest.mark.parametrize("native", [True, False])
def test_an_agent_asking_again_and_again_for_a_tool_it_lacks_is_stopped(
    evaluator: OnlineEvaluator, native: bool
) -> None:
    # under stop_on_loop=True the guard is asked as a tool starts (CrewAI's before-tool
    # hook), and with ReAct no tool starts for a call of a tool the agent does not have:
    # an agent asking for track_parcel five times was never alerted (CrewAI failed the
    # task at the fifth), where tool_call_loops scored the run 0.0 and the native path
    # stopped it at the third
    lookup_order = _shipped_lookup()
    asks = [_ask_for_a1(native, f"c{number}", "track_parcel") for number in range(5)]
    done = "A-1 has shipped." if native else "Thought: done\nFinal Answer: A-1 has shipped."
    llm = ScriptedLLM(model="scripted", native=native, replies=[*asks, done])
    alerts: list[LoopAlert] = []
    evaluator.engine.sinks.append(CallbackSink(on_alert=alerts.append))
    listener = AgentEvalListener(evaluator, stop_on_loop=True)
    agent = Agent(role="support", goal="answer", backstory="b", llm=llm, tools=[lookup_order])
    crew = Crew(
        agents=[agent], tasks=[Task(description="Where is A-1?", expected_output="x", agent=agent)]
    )
    try:
        if native:  # the guard refused the third and later calls: the agent answered
            assert str(crew.kickoff()) == "A-1 has shipped."
        else:  # CrewAI's own check fails the task at the fifth request
            with pytest.raises(Exception, match="with the same arguments 5 times"):
                crew.kickoff()
        [trace] = captured_by(listener)
    finally:
        listener.close()
    message = 'track_parcel called 3 times with the same arguments {"order_id": "A-1"}'
    assert (trace.status, trace.status_reason) == (
        RunStatus.STOPPED,
        f"stopped by the loop guard: {message}",
    )
    assert [(a.pattern, a.count, a.message, a.stopped) for a in alerts] == [
        ("repeated_call", 3, message, True)
    ]
    assert [(a.message, a.trace_id) for a in trace.alerts] == [(message, trace.id)]
    [alert] = alerts
    assert [(c.name, c.arguments) for c in alert.calls] == [
        ("track_parcel", {"order_id": "A-1"})
    ] * 3
    calls = [s for s in trace.spans if s.tool_call is not None]
    assert [s.tool_call.name for s in calls] == ["track_parcel"] * 5  # type: ignore[union-attr]
    # native: refused by the guard from the third on; ReAct: CrewAI answered each itself
    refused = [bool(s.attributes.get(GUARD_REFUSED)) for s in calls]
    assert refused == ([False, False, True, True, True] if native else [False] * 5)
    assert ToolCallLoops().measure(trace).score == 0.0


def test_tasks_run_at_once_asking_for_a_tool_they_lack_are_counted_apart(
    evaluator: OnlineEvaluator,
) -> None:
    # two async_execution tasks, each asking twice for a tool its agent lacks: under
    # stop_on_loop the guard counts each task's calls in a lane of its own (as its hook
    # does for the tools they have), so neither asked three times
    def tracker(name: str) -> tuple[Agent, Task]:
        asks = [_ask_for_a1(False, f"{name}{n}", "track_parcel") for n in range(2)]
        llm = ScriptedLLM(model="scripted", replies=[*asks, "Thought: done\nFinal Answer: ok"])
        agent = Agent(role=f"tracker {name}", goal="g", backstory="b", llm=llm, tools=[])
        return agent, Task(
            description=f"Track A-1 ({name})",
            expected_output="x",
            agent=agent,
            async_execution=True,
        )

    trackers = [tracker("a"), tracker("b")]
    writer = Agent(
        role="writer", goal="g", backstory="b", llm=ScriptedLLM(model="s", replies=["Done."])
    )
    sum_up = Task(
        description="Sum up", expected_output="x", agent=writer, context=[t for _, t in trackers]
    )
    crew = Crew(
        agents=[*(a for a, _ in trackers), writer], tasks=[*(t for _, t in trackers), sum_up]
    )
    listener = AgentEvalListener(evaluator, stop_on_loop=True)
    try:
        assert str(crew.kickoff()) == "Done."
        [trace] = captured_by(listener)
    finally:
        listener.close()
    assert (trace.status, trace.alerts) == (RunStatus.OK, [])
    calls = [s.tool_call for s in trace.spans if s.tool_call is not None]
    assert [(c.name, c.arguments) for c in calls] == [("track_parcel", {"order_id": "A-1"})] * 4


def test_the_call_that_shapes_a_tasks_output_is_no_step(evaluator: OnlineEvaluator) -> None:
    # a task with output_pydantic has CrewAI convert the agent's answer with one more model
    # call, after the agent finished: that call was a step whose JSON a judge read as the
    # agent's output
    from pydantic import BaseModel

    class OrderStatus(BaseModel):
        order_id: str
        status: str

    @tool("lookup_order")
    def lookup_order(order_id: str) -> str:
        """Status of an order."""
        return "shipped"

    shaped = '{"order_id": "A-1", "status": "shipped"}'
    llm = ScriptedLLM(
        model="scripted",
        replies=[
            action("lookup_order", order_id="A-1"),
            "Thought: done\nFinal Answer: A-1 has shipped.",
            shaped,
        ],
    )
    agent = Agent(
        role="support", goal="answer", backstory="b", llm=llm, tools=[lookup_order], verbose=False
    )
    task = Task(
        description="Where is A-1?", expected_output="x", agent=agent, output_pydantic=OrderStatus
    )
    listener = AgentEvalListener(evaluator)
    try:
        result = Crew(agents=[agent], tasks=[task]).kickoff()
        [trace] = captured_by(listener)
    finally:
        listener.close()
    assert result.pydantic == OrderStatus(order_id="A-1", status="shipped")
    parents = {s.id: s for s in trace.spans}
    calls = [
        (parents[s.parent_id].kind, s.output, s.attributes.get(INTERNAL_CALL))
        for s in trace.spans_of(SpanKind.LLM)
    ]
    assert calls == [
        (SpanKind.AGENT, action("lookup_order", order_id="A-1"), None),
        (SpanKind.AGENT, "Thought: done\nFinal Answer: A-1 has shipped.", None),
        (SpanKind.TASK, shaped, True),  # the call is in the trace (its tokens count)
    ]
    assert [(len(step.tool_calls), step.output) for step in trace.steps()] == [
        (1, action("lookup_order", order_id="A-1")),
        (0, "Thought: done\nFinal Answer: A-1 has shipped."),
    ]
    assert (trace.status, trace.output) == (RunStatus.OK, "A-1 has shipped.")


def local_embedder() -> dict[str, Any]:
    """An ``embedder=`` for CrewAI's knowledge and memory that runs here (CrewAI's default
    calls OpenAI): a text's length mod 7 and its count of "A"."""
    import numpy as np
    from chromadb.api.types import EmbeddingFunction
    from crewai.rag.embeddings.providers.custom.embedding_callable import (
        CustomEmbeddingFunction,
    )

    class Letters(CustomEmbeddingFunction, EmbeddingFunction):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        @staticmethod
        def name() -> str:
            return "letters"

        def __call__(self, input: Any) -> Any:
            return [np.array([len(t) % 7, t.count("A"), 1.0], dtype=np.float32) for t in input]

    return {"provider": "custom", "config": {"embedding_callable": Letters}}


def test_an_agents_knowledge_search_is_a_retrieval_of_its_run(
    evaluator: OnlineEvaluator, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CrewAI asks the agent's model to rewrite the task as a search query, naming no task:
    # that call was captured as a run of its own (its prompt the request, the query the
    # answer), scored and counted in sessions, and the crew's run had no retrieval
    from crewai.knowledge.source.string_knowledge_source import StringKnowledgeSource

    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path))  # the knowledge's vector store
    llm = ScriptedLLM(
        model="scripted",
        replies=["order A-1 shipping date", "Thought: done\nFinal Answer: A-1 shipped on Monday."],
    )
    source = StringKnowledgeSource(content="Order A-1 shipped on Monday by DHL.")
    trace = support_run(
        evaluator,
        llm,
        "When did A-1 ship?",
        "A-1 shipped on Monday.",
        knowledge_sources=[source],
        embedder=local_embedder(),
    )
    assert (trace.input, trace.output) == ("When did A-1 ship?", "A-1 shipped on Monday.")
    [retrieval] = trace.spans_of(SpanKind.RETRIEVER)
    assert (retrieval.name, retrieval.input, retrieval.error) == (
        "knowledge",
        "order A-1 shipping date",
        None,
    )
    assert "Order A-1 shipped on Monday by DHL." in retrieval.output
    rewrite, answer = trace.spans_of(SpanKind.LLM)
    assert rewrite.output == "order A-1 shipping date"
    assert {s.id for s in trace.spans if s.parent_id == retrieval.id} == {rewrite.parent_id}
    # the rewrite is CrewAI's, no step of the agent: one step, the answer
    assert [s.output for s in trace.steps()] == [answer.output]


def test_the_memorys_model_calls_are_no_steps_and_no_runs_of_their_own(
    evaluator: OnlineEvaluator, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # after a task, CrewAI's memory asks the model to extract memories from the result (in
    # the agent's scope: it was a step of the agent, a second answer) and, on a background
    # thread, to place each one (outside any scope: it was a run of its own)
    monkeypatch.setenv("CREWAI_STORAGE_DIR", str(tmp_path))

    def reply(messages: Any) -> str:
        asked = messages[0]["content"]
        if asked.startswith("You extract"):
            return json.dumps({"memories": ["A-1 shipped on Monday."]})
        if asked.startswith("You analyze"):
            return json.dumps({"suggested_scope": "/orders", "categories": [], "importance": 0.5})
        return "Thought: done\nFinal Answer: A-1 shipped on Monday."

    trace = support_run(
        evaluator,
        ScriptedLLM(model="scripted", reply=reply),
        "When did A-1 ship?",
        "A-1 shipped on Monday.",
        crew_options={"memory": True, "embedder": local_embedder()},
    )
    assert (trace.input, trace.output) == ("When did A-1 ship?", "A-1 shipped on Monday.")
    answered, extracted, placed = trace.spans_of(SpanKind.LLM)
    assert [s.input[0]["content"][:11] for s in (extracted, placed)] == [
        "You extract",
        "You analyze",
    ]
    assert [s.attributes.get(INTERNAL_CALL) for s in (answered, extracted, placed)] == [
        None,
        True,
        True,
    ]
    assert [s.output for s in trace.steps()] == [answered.output]


def test_an_mcp_servers_tools_are_the_runs_tools(evaluator: OnlineEvaluator) -> None:
    # a crew adds an agent's MCP tools (and delegation tools) to its task, and CrewAI's
    # events list only the agent's own: the run offered no tools, so no call was checked
    # against its schema, and exports listed none
    import re
    import sys
    from pathlib import Path

    from crewai.mcp import MCPServerStdio

    server = Path(__file__).with_name("mcp_orders_server.py")

    def reply(messages: Any) -> str:
        [name] = re.findall(r"Tool Name: (\S+)", messages[0]["content"])  # server-prefixed
        asked = sum(1 for m in messages if str(m.get("content", "")).startswith("Thought:"))
        if asked == 0:
            return f'Thought: look it up\nAction: {name}\nAction Input: {{"order_id": "A-1"}}'
        return "Thought: done\nFinal Answer: A-1 has shipped."

    trace = support_run(
        evaluator,
        ScriptedLLM(model="scripted", reply=reply),
        "Where is A-1?",
        "A-1 has shipped.",
        mcps=[MCPServerStdio(command=sys.executable, args=[str(server)])],
    )
    [offered] = trace.tools
    assert offered.description == "Status of an order."  # its name: the server's, cut
    assert offered.parameters is not None
    assert offered.parameters["properties"]["order_id"]["type"] == "string"
    [call] = trace.tool_calls()
    assert (call.name, call.arguments, call.result, call.error) == (
        offered.name,
        {"order_id": "A-1"},
        "shipped",
        None,
    )
    checked = ParameterCorrectness().measure(trace)
    assert (checked.score, checked.reason) == (1.0, "1 calls checked, 0 with schema errors")


def test_a_long_run_records_what_each_call_was_sent_and_writes_it_once(
    evaluator: OnlineEvaluator,
) -> None:
    # every model call is sent the conversation so far (CrewAI's events copy the messages):
    # written as it came, the capture line grew with the square of the run's length
    @tool("read_page")
    def read_page(page: int) -> str:
        """Read a page of the manual."""
        return f"page {page}: " + "the pump primes in three strokes. " * 40

    received: list[list[tuple[str, Any]]] = []

    def reply(messages: Any) -> str | list[dict[str, Any]]:
        received.append([(m["role"], m["content"]) for m in messages])
        turn = len(received)
        if turn <= 6:
            return [native_call(f"c{turn}", "read_page", page=turn)]
        return "It primes in three strokes."

    llm = ScriptedLLM(model="gpt-4o", native=True, reply=reply)
    agent = Agent(role="reader", goal="read", backstory="b", llm=llm, tools=[read_page])
    task = Task(description="How does the pump prime?", expected_output="short", agent=agent)
    listener = AgentEvalListener(evaluator)
    Crew(agents=[agent], tasks=[task]).kickoff()
    [trace] = captured_by(listener)
    calls = trace.spans_of(SpanKind.LLM)
    assert [[(m["role"], m["content"]) for m in call.input] for call in calls] == received
    assert len(calls) == 7
    written = json.dumps(
        [s["input"] for s in json.loads(trace.to_json())["spans"] if s["kind"] == "llm"]
    )
    for page in range(1, 7):
        assert written.count(json.dumps(read_page.run(page=page))) == 1  # written once
