"""One loop guard in three frameworks: the same looping agent, scripted the same way in
LangChain, LlamaIndex and CrewAI, is stopped at the same call, before that call runs, and
the trace records the refusal, the alert and the ``stopped`` status the same way."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agenteval_core import (
    GUARD_REFUSED,
    LoopAlert,
    OnlineEvaluator,
    RunStatus,
    SpanKind,
    ToolCall,
    Trace,
    read_capture,
)
from agenteval_core.metrics import ToolCallLoops

# lookup, note, lookup, note, lookup: no call repeats the one just before it (CrewAI answers
# an immediate repeat itself) and the notes differ (no cycle), so the 5th call is the 3rd
# identical lookup: the guard's default threshold.
SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("lookup_order", {"order_id": "A-2"}),
    ("note", {"text": "first check"}),
    ("lookup_order", {"order_id": "A-2"}),
    ("note", {"text": "second check"}),
    ("lookup_order", {"order_id": "A-2"}),
]
RAN = ["lookup_order", "note", "lookup_order", "note"]
MESSAGE = 'lookup_order called 3 times with the same arguments {"order_id": "A-2"}'


class Tools:
    """The two tools, recording every time their body runs; the order's status is each of
    ``statuses`` in turn, then the last (by default "processing", every time). The agents
    ask for the calls of ``script`` (by default SCRIPT), one per turn."""

    def __init__(
        self,
        statuses: tuple[str, ...] = ("processing",),
        script: list[tuple[str, dict[str, Any]]] = SCRIPT,
        *,
        stamped: bool = False,
    ) -> None:
        self.ran: list[str] = []
        self.statuses = statuses
        self.script = script
        self.stamped = stamped

    def lookup_order(self, order_id: str) -> str:
        """Status of an order by id."""
        self.ran.append("lookup_order")
        looked = self.ran.count("lookup_order")
        status = self.statuses[min(looked, len(self.statuses)) - 1]
        if not self.stamped:
            return status
        # as a raw API answers: the time it was asked and an id of the request, new each time
        checked = datetime.datetime(2026, 12, 3, 9, 30, looked, tzinfo=datetime.UTC)
        return json.dumps(
            {"status": status, "checked_at": checked.isoformat(), "request_id": str(uuid.uuid4())}
        )

    def status_of(self, result: Any) -> str:
        """The status a lookup's ``result`` gave (a stamped answer is JSON)."""
        return str(json.loads(result)["status"] if self.stamped else result)

    def note(self, text: str) -> str:
        """Write a note."""
        self.ran.append("note")
        return "noted"


@pytest.fixture
def evaluator(tmp_path: Path) -> Iterator[OnlineEvaluator]:
    alerts: list[tuple[LoopAlert, str]] = []
    evaluator = OnlineEvaluator(
        capture=tmp_path / "capture.jsonl",
        on_alert=lambda alert: alerts.append((alert, threading.current_thread().name)),
        log=False,
    )
    evaluator.alerts = alerts  # type: ignore[attr-defined]
    yield evaluator
    evaluator.close()


def check_stopped_trace(evaluator: OnlineEvaluator, tools: Tools) -> Trace:
    assert evaluator.flush(20)
    assert tools.ran == RAN  # the refused lookup never ran
    assert evaluator.capture_path is not None
    [trace] = list(read_capture(evaluator.capture_path))
    assert trace.status is RunStatus.STOPPED
    assert trace.status_reason == f"stopped by the loop guard: {MESSAGE}"
    [alert] = trace.alerts
    assert (alert.pattern, alert.count, alert.stopped, alert.message) == (
        "repeated_call",
        3,
        True,
        MESSAGE,
    )
    assert alert.trace_id == trace.id
    assert [c.arguments for c in alert.calls] == [{"order_id": "A-2"}] * 3
    refused = [s for s in trace.spans if s.attributes.get(GUARD_REFUSED)]
    assert len(refused) == 1
    [span] = refused
    assert span.kind is SpanKind.TOOL and span.error == f"refused by the loop guard: {MESSAGE}"
    assert span.tool_call is not None
    assert (span.tool_call.name, span.tool_call.arguments, span.tool_call.result) == (
        "lookup_order",
        {"order_id": "A-2"},
        None,
    )
    executed = [
        (c.name, c.arguments)
        for c in trace.tool_calls()
        if c.error is None or "refused" not in c.error
    ]
    assert executed == [(name, args) for name, args in SCRIPT[:4]]
    # the alert reached the callbacks once, on the recorder's thread; the run is forgotten
    delivered = evaluator.alerts  # type: ignore[attr-defined]
    assert [(a.message, thread) for a, thread in delivered] == [(MESSAGE, "agenteval-recorder")]
    assert len(evaluator.guard) == 0
    return trace


def langchain_agent(tools: Tools) -> Any:
    """A LangChain agent whose scripted model asks for the calls of the tools' script, one
    per turn."""
    from agenteval_langchain._scripted import ScriptedChatModel, tool_call
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import StructuredTool

    replies = [
        AIMessage(content="", tool_calls=[tool_call(name, f"c{i}", **args)])
        for i, (name, args) in enumerate(tools.script)
    ]
    return create_agent(
        ScriptedChatModel(replies=[*replies, AIMessage(content="done")]),
        tools=[
            StructuredTool.from_function(tools.lookup_order, name="lookup_order"),
            StructuredTool.from_function(tools.note, name="note"),
        ],
    )


def run_langchain(evaluator: OnlineEvaluator, tools: Tools) -> None:
    """The LangChain agent under the guard, until it answers or is stopped (it raises)."""
    from agenteval_langchain import AgentEvalCallbackHandler

    agent = langchain_agent(tools)
    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=True)
    try:
        agent.invoke({"messages": [("user", "Is A-2 ready?")]}, config={"callbacks": [handler]})
    finally:
        assert len(handler._guard.runs) == 0  # type: ignore[union-attr]


def test_langchain(evaluator: OnlineEvaluator) -> None:
    from agenteval_langchain import AgentLoopError

    tools = Tools()
    with pytest.raises(AgentLoopError, match="lookup_order called 3 times"):
        run_langchain(evaluator, tools)
    trace = check_stopped_trace(evaluator, tools)
    assert trace.error is not None and "AgentLoopError" in trace.error


def run_llamaindex(evaluator: OnlineEvaluator, tools: Tools) -> BaseException | None:
    """The LlamaIndex agent under the guard, until it answers or is stopped; what its run
    raised (``None`` when it answered)."""
    from agenteval_llamaindex import instrument
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ToolCallBlock
    from llama_index.core.llms import ChatMessage, MessageRole
    from llama_index.core.llms.mock import MockFunctionCallingLLM
    from llama_index.core.tools import FunctionTool

    replies = [
        ChatMessage(
            role=MessageRole.ASSISTANT,
            blocks=[ToolCallBlock(tool_call_id=f"c{i}", tool_name=name, tool_kwargs=args)],
        )
        for i, (name, args) in enumerate(tools.script)
    ] + [ChatMessage(role=MessageRole.ASSISTANT, content="done")]

    def reply(messages: list[ChatMessage], **_: Any) -> ChatMessage:
        done = sum(1 for m in messages if m.role == MessageRole.TOOL)
        return replies[min(done, len(replies) - 1)]

    agent = FunctionAgent(
        tools=[
            FunctionTool.from_defaults(tools.lookup_order, name="lookup_order"),
            FunctionTool.from_defaults(tools.note, name="note"),
        ],
        llm=MockFunctionCallingLLM(response_generator=reply),
    )
    instrumentation = instrument(evaluator, stop_on_loop=True)
    try:

        async def main() -> BaseException | None:
            run = instrumentation.guard(agent.run("Is A-2 ready?", max_iterations=50))
            try:
                await run
            except BaseException as stopped:
                return stopped
            return None

        raised = asyncio.run(main())
        assert evaluator.flush(20)
        assert len(instrumentation.runs) == 0
        return raised
    finally:
        instrumentation.uninstrument()


def test_llamaindex(evaluator: OnlineEvaluator) -> None:
    tools = Tools()
    stopped = run_llamaindex(evaluator, tools)
    assert type(stopped).__name__ == "WorkflowCancelledByUser"
    check_stopped_trace(evaluator, tools)


def run_crewai(evaluator: OnlineEvaluator, tools: Tools) -> None:
    """The CrewAI crew under the guard, until it answers or is stopped."""
    from agenteval_crewai import AgentEvalListener
    from agenteval_crewai._scripted import ScriptedLLM
    from crewai import Agent, Crew, Task
    from crewai.tools import tool

    def crew_tool(function: Callable[..., str]) -> Any:
        return tool(function.__name__)(function)

    def action(name: str, args: dict[str, Any]) -> str:
        return f"Thought: check.\nAction: {name}\nAction Input: {json.dumps(args)}"

    replies = [action(name, args) for name, args in tools.script]
    llm = ScriptedLLM(model="scripted", replies=[*replies, "Thought: stop\nFinal Answer: done"])

    def lookup_order(order_id: str) -> str:
        """Status of an order by id."""
        return tools.lookup_order(order_id)

    def note(text: str) -> str:
        """Write a note."""
        return tools.note(text)

    agent = Agent(
        role="support",
        goal="answer",
        backstory="b",
        llm=llm,
        tools=[crew_tool(lookup_order), crew_tool(note)],
        verbose=False,
    )
    listener = AgentEvalListener(evaluator, stop_on_loop=True)
    try:
        Crew(
            agents=[agent],
            tasks=[Task(description="Is A-2 ready?", expected_output="status", agent=agent)],
        ).kickoff()
        assert listener.flush(20)
    finally:
        listener.close()


def test_crewai(evaluator: OnlineEvaluator) -> None:
    tools = Tools()
    run_crewai(evaluator, tools)
    check_stopped_trace(evaluator, tools)


@pytest.mark.parametrize("run", [run_langchain, run_llamaindex, run_crewai])
def test_a_call_that_finds_its_order_moved_on_is_no_loop(
    evaluator: OnlineEvaluator, run: Callable[[OnlineEvaluator, Tools], Any]
) -> None:
    # the same lookup three times, its answer new each time (a file read again after each
    # edit, a status that moves on): the agent sees what its work did. The guard counted
    # the calls alone and stopped the run at the third
    tools = Tools(statuses=("processing", "packed", "shipped"))
    run(evaluator, tools)
    assert evaluator.flush(20)
    assert tools.ran == [name for name, _ in SCRIPT]  # every call ran
    assert evaluator.capture_path is not None
    [trace] = list(read_capture(evaluator.capture_path))
    assert (trace.status, trace.alerts, evaluator.alerts) == (RunStatus.OK, [], [])  # type: ignore[attr-defined]
    looked = [c.result for c in trace.tool_calls() if c.name == "lookup_order"]
    assert looked == ["processing", "packed", "shipped"]
    assert ToolCallLoops().measure(trace).score == 1.0


ORDER_POLL = [("lookup_order", {"order_id": "A-2"}), ("note", {"text": "wait a minute"})] * 3 + [
    ("lookup_order", {"order_id": "A-2"})
]


@pytest.mark.parametrize("stamped", [False, True], ids=["plain", "stamped"])
@pytest.mark.parametrize("run", [run_langchain, run_llamaindex, run_crewai])
def test_an_agent_that_polls_an_order_that_moves_on_is_no_loop(
    evaluator: OnlineEvaluator, run: Callable[[OnlineEvaluator, Tools], Any], stamped: bool
) -> None:
    # an agent polls the order (its status, a wait, its status again) while it moves on:
    # the cycle lookup_order → note went round with a new status each time. The guard
    # compared the calls alone: it stopped the run at the second wait as a cycle (and at
    # the third as the same note three times), before the agent saw the order delivered
    tools = Tools(
        statuses=("processing", "packed", "shipped", "delivered"),
        script=ORDER_POLL,
        stamped=stamped,
    )
    run(evaluator, tools)
    assert evaluator.flush(20)
    assert tools.ran == [name for name, _ in ORDER_POLL]  # every call ran
    assert evaluator.capture_path is not None
    [trace] = list(read_capture(evaluator.capture_path))
    assert (trace.status, trace.alerts, evaluator.alerts) == (RunStatus.OK, [], [])  # type: ignore[attr-defined]
    looked = [tools.status_of(c.result) for c in trace.tool_calls() if c.name == "lookup_order"]
    assert looked == ["processing", "packed", "shipped", "delivered"]
    assert ToolCallLoops().measure(trace).score == 1.0


@pytest.mark.parametrize("stamped", [False, True], ids=["plain", "stamped"])
@pytest.mark.parametrize("run", [run_langchain, run_llamaindex, run_crewai])
def test_an_agent_that_polls_an_order_that_stays_put_is_stopped(
    evaluator: OnlineEvaluator, run: Callable[[OnlineEvaluator, Tools], Any], stamped: bool
) -> None:
    # the same polling while the order stays "processing" goes round with nothing new:
    # stopped as the cycle closes, at the second wait, which never runs. Stamped, each
    # answer carries the time it was asked and a new request id, as raw APIs do: those
    # changed, the order did not, and the run went on polling to the end of its script
    from agenteval_langchain import AgentLoopError

    tools = Tools(script=ORDER_POLL, stamped=stamped)
    with contextlib.suppress(AgentLoopError):  # LangChain's way to stop; the others end
        run(evaluator, tools)
    assert evaluator.flush(20)
    assert tools.ran == ["lookup_order", "note", "lookup_order"]
    assert evaluator.capture_path is not None
    [trace] = list(read_capture(evaluator.capture_path))
    message = "cycle lookup_order → note repeated 2 times"
    assert (trace.status, trace.status_reason) == (
        RunStatus.STOPPED,
        f"stopped by the loop guard: {message}",
    )
    [alert] = trace.alerts
    assert (alert.pattern, alert.count, alert.message) == ("cycle", 2, message)
    assert [(c.name, c.arguments) for c in alert.calls] == ORDER_POLL[:4]
    assert ToolCallLoops().measure(trace).score == 0.0


def test_the_guard_forgets_a_stopped_run_for_the_next_one(evaluator: OnlineEvaluator) -> None:
    # the same run key reused (CrewAI reuses its ids across kickoffs) starts clean once the
    # earlier run's trace has finished
    recorder = evaluator.recorder
    lookup = ToolCall(name="lookup_order", arguments={"order_id": "A-2"})
    for _ in range(3):
        recorder.check_tool_call("run-1", lookup, refuse=lambda event: None)
    assert recorder.guard.stopped_by("run-1") is not None
    recorder.guard.forget("run-1")
    assert recorder.check_tool_call("run-1", lookup, refuse=lambda event: None) is None


def test_langchain_under_ainvoke(evaluator: OnlineEvaluator) -> None:
    # the sync handler stops a run under ainvoke too, with sync tools
    from agenteval_langchain import AgentEvalCallbackHandler, AgentLoopError

    tools = Tools()
    agent = langchain_agent(tools)
    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=True)

    async def main() -> None:
        with pytest.raises(AgentLoopError, match="lookup_order called 3 times"):
            await agent.ainvoke(
                {"messages": [("user", "Is A-2 ready?")]}, config={"callbacks": [handler]}
            )

    asyncio.run(main())
    check_stopped_trace(evaluator, tools)


def test_the_evaluators_loop_threshold_is_the_metrics(tmp_path: Path) -> None:
    # an evaluator whose guard allows 5 identical calls: the run's 3 lookups passed the
    # guard without an alert, and its tool_call_loops, left at 3, scored the run a loop
    scored: list[Any] = []
    evaluator = OnlineEvaluator(
        capture=tmp_path / "capture.jsonl",
        loop_repeat_threshold=5,
        on_result=lambda trace, results: scored.append(results),
        log=False,
    )
    from agenteval_langchain import AgentEvalCallbackHandler

    tools = Tools()
    try:
        answer = langchain_agent(tools).invoke(
            {"messages": [("user", "Is A-2 ready?")]},
            config={"callbacks": [AgentEvalCallbackHandler(evaluator, stop_on_loop=True)]},
        )
        assert evaluator.flush(20)
    finally:
        evaluator.close()
    assert answer["messages"][-1].content == "done"
    assert tools.ran == [name for name, _ in SCRIPT]  # all five ran: no loop at 5
    [trace] = list(read_capture(tmp_path / "capture.jsonl"))
    assert (trace.status, trace.alerts) == (RunStatus.OK, [])
    [results] = scored
    loops = next(r for r in results.results if r.name == "tool_call_loops")
    assert (loops.score, loops.reason) == (
        1.0,
        "no repeated calls or cycles among 5 tool calls",
    )


POLL: list[tuple[str, dict[str, Any]]] = [
    ("job_status", {"job": "deploy-7"}),
    ("wait", {"seconds": 10}),
    ("job_status", {"job": "deploy-7"}),
    ("wait", {"seconds": 10}),
    ("job_status", {"job": "deploy-7"}),
]


def polling_agent(statuses: list[str]) -> Any:
    """A LangChain agent that checks a deploy, waits and checks again until it is done."""
    from agenteval_langchain._scripted import ScriptedChatModel, tool_call
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    @tool
    def job_status(job: str) -> str:
        """The status of a job."""
        return statuses.pop(0)

    @tool
    def wait(seconds: int) -> str:
        """Wait before checking again."""
        return f"waited {seconds} s"

    replies = [
        AIMessage(content="", tool_calls=[tool_call(name, f"p{i}", **args)])
        for i, (name, args) in enumerate(POLL)
    ]
    model = ScriptedChatModel(replies=[*replies, AIMessage(content="deploy-7 is live")])
    return create_agent(model, tools=[job_status, wait])


@pytest.mark.parametrize(
    ("options", "stopped"),
    [({}, True), ({"loop_repeat_threshold": 10, "loop_cycle_repeats": 10}, False)],
)
def test_a_polling_agent_is_a_loop_unless_the_evaluator_allows_its_rounds(
    tmp_path: Path, options: dict[str, int], stopped: bool
) -> None:
    # check → wait → check → wait closes a cycle at the defaults, and stop_on_loop stops the
    # deploy watch at its fourth call; the evaluator can allow more rounds, and the metric
    # then agrees with the guard
    from agenteval_langchain import AgentEvalCallbackHandler, AgentLoopError

    scored: list[Any] = []
    evaluator = OnlineEvaluator(
        capture=tmp_path / "capture.jsonl",
        on_result=lambda trace, results: scored.append(results),
        log=False,
        **options,  # type: ignore[arg-type]
    )
    agent = polling_agent(["running", "running", "live"])
    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=True)
    try:
        if stopped:
            with pytest.raises(AgentLoopError, match="cycle job_status → wait repeated 2 times"):
                agent.invoke({"messages": [("user", "Watch deploy-7")]}, {"callbacks": [handler]})
        else:
            answer = agent.invoke(
                {"messages": [("user", "Watch deploy-7")]}, {"callbacks": [handler]}
            )
            assert answer["messages"][-1].content == "deploy-7 is live"
        assert evaluator.flush(20)
    finally:
        evaluator.close()
    [trace] = list(read_capture(tmp_path / "capture.jsonl"))
    [results] = scored
    loops = next(r for r in results.results if r.name == "tool_call_loops")
    if stopped:
        assert trace.status is RunStatus.STOPPED
        assert [alert.pattern for alert in trace.alerts] == ["cycle"]
        assert loops.score == 0.0
    else:
        assert (trace.status, trace.alerts) == (RunStatus.OK, [])
        assert [(c.name, c.arguments, c.result) for c in trace.tool_calls()] == [
            ("job_status", {"job": "deploy-7"}, "running"),
            ("wait", {"seconds": 10}, "waited 10 s"),
            ("job_status", {"job": "deploy-7"}, "running"),
            ("wait", {"seconds": 10}, "waited 10 s"),
            ("job_status", {"job": "deploy-7"}, "live"),
        ]
        assert loops.score == 1.0
