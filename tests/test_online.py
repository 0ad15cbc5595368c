"""The live path: event pump, trace assembler, loop guard, recorder and online evaluator."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenteval_core import (
    GUARD_REFUSED,
    CallbackSink,
    CaptureFormatError,
    ConsoleSink,
    EvalCase,
    LoopAlert,
    LoopGuard,
    Metric,
    MetricInputError,
    MetricKind,
    MetricResult,
    OnlineEvaluator,
    ResultsFileSink,
    RunStatus,
    Score,
    Sink,
    SpanKind,
    ToolCall,
    Trace,
    TraceResults,
    read_capture,
)
from agenteval_core.judges import OpenAIJudge
from agenteval_core.metrics._judge_base import describe_trace
from agenteval_core.recording import EventPump, Recorder, RunRoots, TaskSteps, TraceAssembler


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


def assembler_with(
    finished: list[Trace], alerts: list[LoopAlert] | None = None, **options: Any
) -> TraceAssembler:
    """An assembler driven directly on the test's thread (the recorder's pump is idle)."""
    recorder = Recorder(
        on_trace=finished.append, on_alert=(alerts if alerts is not None else []).append
    )
    return TraceAssembler("test", recorder, **options)


# --- assembler --------------------------------------------------------------------------------


def test_assembler_builds_one_trace_with_parent_links() -> None:
    finished: list[Trace] = []
    assembler = assembler_with(finished)
    assembler.start_span("root", None, SpanKind.AGENT, "agent", input="q", start_time=1.0)
    assembler.start_span("llm", "root", SpanKind.LLM, "model", start_time=2.0, session_id="s1")
    assembler.end_span("llm", output="use tool", end_time=3.0, thought="use tool")
    call = ToolCall(id="c1", name="lookup", arguments={"id": 7})
    assembler.start_span("tool", "root", SpanKind.TOOL, "lookup", start_time=4.0, tool_call=call)
    assembler.end_span("tool", output="found", end_time=5.0)
    assert not finished
    assembler.end_span("root", output="answer", end_time=6.0)
    [trace] = finished
    root, llm, tool = trace.spans
    assert (trace.input, trace.output, trace.session_id, trace.framework) == (
        "q",
        "answer",
        "s1",
        "test",
    )
    assert llm.parent_id == root.id and tool.parent_id == root.id and root.parent_id is None
    assert trace.tool_calls() == [
        ToolCall(id="c1", name="lookup", arguments={"id": 7}, result="found")
    ]
    assert trace.steps()[0].thought == "use tool"
    assert (trace.status, trace.status_reason, trace.alerts) == (RunStatus.OK, None, [])
    assert assembler.open_traces() == 0 and len(assembler.recorder.guard) == 0


class _Message:
    """A framework's message object, which its model calls are sent again and again."""

    def __init__(self, role: str, content: str) -> None:
        self.role, self.content = role, content


def test_a_conversation_resent_to_each_model_call_is_converted_and_held_once() -> None:
    # each model call is sent the whole conversation again: converted and held anew each
    # time, a run of n calls cost time and memory on the order of n squared
    finished: list[Trace] = []
    assembler = assembler_with(finished)
    assembler.start_span("root", None, SpanKind.AGENT, "agent", input="q")
    converted: list[list[str]] = []

    def convert(messages: list[_Message]) -> list[dict[str, str]]:
        converted.append([m.content for m in messages])
        return [{"role": m.role, "content": m.content} for m in messages]

    conversation = [_Message("user", "q")]
    for turn in range(4):
        if turn == 3:
            conversation[1].content = "call 0, edited"  # changed in place since it was sent
        sent = assembler.messages("root", list(conversation), convert)
        assembler.start_span(f"llm{turn}", "root", SpanKind.LLM, "m", input=[sent])
        assembler.end_span(f"llm{turn}", output="")
        conversation += [_Message("ai", f"call {turn}"), _Message("tool", f"result {turn}")]
    # a framework whose events copy the messages (equal dicts, new objects): held once too
    copies = [{"role": m.role, "content": m.content} for m in conversation]
    assembler.start_span("llm4", "root", SpanKind.LLM, "m", input=copies)
    assembler.end_span("root", output="a")
    [trace] = finished
    assert converted == [
        ["q"],
        ["call 0", "result 0"],
        ["call 1", "result 1"],
        ["call 0, edited", "call 2", "result 2"],
    ]
    inputs = [s.input[0] for s in trace.spans_of(SpanKind.LLM)[:4]]
    assert inputs[3] == [
        {"role": "user", "content": "q"},
        {"role": "ai", "content": "call 0, edited"},
        {"role": "tool", "content": "result 0"},
        {"role": "ai", "content": "call 1"},
        {"role": "tool", "content": "result 1"},
        {"role": "ai", "content": "call 2"},
        {"role": "tool", "content": "result 2"},
    ]
    assert inputs[1][1] == {"role": "ai", "content": "call 0"}  # as that call was sent it
    assert inputs[3][0] is inputs[0][0] and inputs[3][2] is inputs[1][2]
    held = trace.spans_of(SpanKind.LLM)[4].input
    assert held == inputs[3] + [
        {"role": "ai", "content": "call 3"},
        {"role": "tool", "content": "result 3"},
    ]
    assert all(a is b for a, b in zip(held, inputs[3], strict=False))


def test_children_still_open_at_root_end_are_kept_with_a_note() -> None:
    finished: list[Trace] = []
    assembler = assembler_with(finished)
    assembler.start_span("root", None, SpanKind.AGENT, "agent")
    assembler.start_span("child", "root", SpanKind.TOOL, "slow", tool_call=ToolCall(name="slow"))
    assembler.end_span("root", error="RuntimeError: boom")
    assembler.end_span("child", output="late")  # after the trace finished: ignored, counted
    [trace] = finished
    assert trace.error == "RuntimeError: boom"
    assert (trace.status, trace.status_reason) == (RunStatus.ERROR, "RuntimeError: boom")
    assert trace.spans[1].error == "not ended before its run ended"
    assert assembler.unknown_ends == 1


def test_open_runs_are_bounded_by_evicting_stale_ones_only() -> None:
    # 25 runs that never end, 10 at t=0 and 15 at t=1,000 s: past 10 open, those without an
    # event for 600 s go, least recently active first; the active ones stay
    finished: list[Trace] = []
    assembler = assembler_with(finished, max_open_runs=10, stale_after=600.0)
    for index in range(10):
        assembler.start_span(f"old{index}", None, SpanKind.AGENT, "never ends", start_time=0.0)
    assembler.start_span("old0/tool", "old0", SpanKind.TOOL, "t", start_time=500.0)  # active
    for index in range(15):
        assembler.start_span(f"new{index}", None, SpanKind.AGENT, "live", start_time=1000.0)
    assert assembler.evicted == 9 and assembler.open_traces() == 16
    assert sorted(trace.spans[0].name for trace in finished) == ["never ends"] * 9
    # how they ended is unknown (an end event lost, say): unfinished, not failed
    assert all(
        (trace.status, trace.status_reason, trace.error)
        == (RunStatus.UNFINISHED, "evicted: the run never ended", None)
        for trace in finished
    )
    assembler.start_span("late", None, SpanKind.AGENT, "live", start_time=1100.0)
    assert assembler.evicted == 10  # old0 was last active at 500 s
    assert assembler.open_traces() == 16


def test_thousands_of_live_runs_are_never_cut_short() -> None:
    # a busy server: more runs in flight than max_open_runs, every one of them active
    finished: list[Trace] = []
    assembler = assembler_with(finished, max_open_runs=100)
    for index in range(300):
        assembler.start_span(f"r{index}", None, SpanKind.AGENT, "agent", input=f"q{index}")
        assembler.start_span(f"r{index}/t", f"r{index}", SpanKind.TOOL, "wait")
    for index in range(300):
        assembler.end_span(f"r{index}/t", output="approved")
        assembler.end_span(f"r{index}", output=f"a{index}")
    assert assembler.evicted == 0
    assert [(t.input, t.output, t.status) for t in finished] == [
        (f"q{i}", f"a{i}", RunStatus.OK) for i in range(300)
    ]
    assert all(t.spans[1].output == "approved" and t.spans[1].error is None for t in finished)


events = st.lists(
    st.tuples(
        st.sampled_from(["start", "end", "error"]),
        st.integers(0, 6),
        st.one_of(st.none(), st.integers(0, 6)),
    ),
    max_size=40,
)


@settings(max_examples=200)
@given(sequence=events)
def test_odd_event_sequences_never_raise_and_lose_no_finished_run(
    sequence: list[tuple[str, int, int | None]],
) -> None:
    finished: list[Trace] = []
    assembler = assembler_with(finished)
    roots_started = 0
    for action, key, parent in sequence:
        if action == "start":
            before = assembler.open_traces()
            assembler.start_span(key, parent, SpanKind.CHAIN, f"run{key}", input={"bytes": b"\x00"})
            roots_started += assembler.open_traces() - before
        else:
            assembler.end_span(key, output=object(), error="boom" if action == "error" else None)
    # every trace that started either finished exactly once or is still open
    assert len(finished) + assembler.open_traces() == roots_started
    assert len({trace.id for trace in finished}) == len(finished)


def test_pump_handles_in_order_and_survives_handler_errors() -> None:
    seen: list[int] = []

    def handle(event: tuple[Any, ...]) -> None:
        if event[1] == 3:
            raise ValueError("bad event")
        seen.append(event[1])

    pump = EventPump()
    for index in range(6):
        pump.put((handle, index))
    assert pump.flush(5)
    assert seen == [0, 1, 2, 4, 5] and pump.errors == 1
    pump.close(5)


def test_run_roots_map_spans_to_their_run_and_forget_ended_runs() -> None:
    runs = RunRoots()
    assert runs.enter("root", None) == "root"
    assert runs.enter("child", "root") == "root"
    assert runs.enter("grandchild", "child") == "root"
    assert runs.enter("other", None) == "other"
    runs.exit("child")  # not a root: nothing forgotten
    assert len(runs) == 2 and runs.enter("late", "grandchild") == "root"
    runs.exit("root")
    runs.exit("other")
    assert len(runs) == 0


def test_run_roots_give_agents_running_at_once_lanes_of_their_own() -> None:
    runs = RunRoots()
    runs.enter("root", None)
    runs.enter("a", "root", may_be_agent=True)
    runs.agent_found("a")
    runs.enter("a-call-1", "a", tool=True)
    assert runs.lane("a-call-1") is None  # one agent so far: the run's lane
    runs.enter("b", "root", may_be_agent=True)
    runs.agent_found("b")
    runs.enter("node", "root", may_be_agent=True)  # named, but runs no graph: no agent
    runs.enter("a-call-2", "a", tool=True)
    runs.enter("b-call-1", "b", tool=True)
    assert (runs.lane("a-call-2"), runs.lane("b-call-1")) == ("a", "b")
    runs.exit("a")
    runs.exit("b")
    runs.enter("c", "root", may_be_agent=True)  # after them, alone
    runs.agent_found("c")
    runs.enter("c-call", "c", tool=True)
    assert runs.lane("c-call") is None
    runs.exit("root")
    assert len(runs) == 0
    # the same keys in a new run: nothing of the old run's lanes is left
    runs.enter("root", None)
    runs.enter("a", "root", may_be_agent=True)
    runs.agent_found("a")
    runs.enter("a-call", "a", tool=True)
    assert runs.lane("a-call") is None
    # two runs that name each other as parent (broken events): the walk up them ends
    broken = RunRoots()
    for key, parent in (("x", "y"), ("y", "x"), ("z", None)):
        broken.enter(key, parent, may_be_agent=True)
        broken.agent_found(key)
    broken.enter("call", "x", tool=True)
    assert broken.lane("call") is None  # each above the other: not beside each other


def test_each_answer_of_a_human_keeps_what_it_answered_when_said() -> None:
    # a flow's feedback (no question said), then an ask() whose question the event says,
    # then a workflow step that asked before it waited: the questions line up with the
    # answers, None where none was said, and a judge is told each
    finished: list[Trace] = []
    assembler = assembler_with(finished)
    assembler.start_span("root", None, SpanKind.AGENT, "flow", input="refund", start_time=1.0)
    assembler.human_answered("root", "approved")
    assembler.human_answered("root", "A-1", question="Which order?")
    assembler.start_span("ask", "root", SpanKind.CHAIN, "ask", start_time=2.0)
    assembler.wait("ask", "waiting for a response to InputRequiredEvent", question="How much?")
    assembler.end_span("ask", end_time=3.0)
    assembler.stop_waiting("root")
    assembler.human_answered("root", "20 EUR")
    assembler.human_answered("root", "yes")  # its question was taken by the answer before
    assembler.end_span("root", output="refunded 20 EUR on A-1", end_time=4.0)
    [trace] = finished
    assert trace.metadata == {
        "human_answers": ["approved", "A-1", "20 EUR", "yes"],
        "human_questions": [None, "Which order?", "How much?", None],
    }
    assert describe_trace(EvalCase.of(trace)).splitlines()[1:5] == [
        "a human answered while the run went on: approved",
        'a human was asked "Which order?" while the run went on, and answered: A-1',
        'a human was asked "How much?" while the run went on, and answered: 20 EUR',
        "a human answered while the run went on: yes",
    ]


@pytest.mark.parametrize(
    ("metadata", "told"),
    [
        (  # answers by interrupt id: each question and its answer, in the order given
            {"resume": {"i2": "no", "i1": "yes"}, "resume_questions": {"i1": "A-1?", "i2": "B-2?"}},
            [
                'the run resumed after a pause for a human, who was asked "B-2?" and answered: no',
                'the run resumed after a pause for a human, who was asked "A-1?" and answered: yes',
            ],
        ),
        (  # a map the questions do not cover, or one written by hand: as it is
            {"resume": {"i1": "yes", "note": "ok"}, "resume_questions": {"i1": "A-1?"}},
            ['the run resumed after a pause for a human, who answered: {"i1": "yes", "note": "ok"}'],
        ),
        (
            {"resume": {"answers_by_question": "yes"}},
            [
                "the run resumed after a pause for a human, who answered: "
                '{"answers_by_question": "yes"}'
            ],
        ),
    ],
)  # fmt: skip
def test_a_judge_is_told_what_each_interrupt_answered_by_id_asked(
    metadata: dict[str, Any], told: list[str]
) -> None:
    trace = Trace.from_steps("Refund A-1 and B-2", [], metadata=metadata)
    assert describe_trace(EvalCase.of(trace)).splitlines()[1:-1] == told


# --- the loop guard --------------------------------------------------------------------------


def test_repeated_identical_call_alerts_at_the_threshold_once() -> None:
    guard = LoopGuard(repeat_threshold=3)
    assert guard.observe("t", call("search", q="x")) is None
    assert guard.observe("t", call("search", q="y")) is None  # other arguments
    assert guard.observe("t", call("search", q="x")) is None
    alert = guard.observe("t", call("search", q="x"), trace_id="trace-1", session_id="s")
    assert alert is not None
    assert (alert.pattern, alert.count, alert.trace_id, alert.session_id) == (
        "repeated_call",
        3,
        "trace-1",
        "s",
    )
    assert alert.message == 'search called 3 times with the same arguments {"q": "x"}'
    assert [c.arguments for c in alert.calls] == [{"q": "x"}] * 3
    assert guard.observe("t", call("search", q="x")) is None  # once per loop
    assert guard.observe("other-run", call("search", q="x")) is None  # runs don't mix
    guard.forget("t")
    guard.forget("other-run")
    assert len(guard) == 0


def test_a_handoff_repeats_only_while_nothing_new_happens() -> None:
    guard = LoopGuard(repeat_threshold=3)
    handoff = call("transfer_to_orders_agent")
    # each handoff followed by a lookup new to the run: delegation, however many
    for order in ("A-1", "B-2", "C-3", "D-4"):
        assert guard.observe("t", handoff) is None
        assert guard.observe("t", call("lookup", order_id=order)) is None
    # then three with nothing new between them: a loop, of those three
    assert guard.observe("t", handoff) is None
    assert guard.observe("t", call("lookup", order_id="A-1")) is None  # seen: nothing new
    assert guard.observe("t", handoff) is None
    alert = guard.observe("t", handoff)
    assert alert is not None and (alert.pattern, alert.count, len(alert.calls)) == (
        "repeated_call",
        3,
        3,
    )
    # another tool's third identical call is a loop however much is new between them
    other = LoopGuard(repeat_threshold=3)
    for order in ("A-1", "B-2", "C-3"):
        found = other.observe("u", call("search", q="x"))
        assert other.observe("u", call("lookup", order_id=order)) is None
    assert found is not None and found.pattern == "repeated_call"


def test_a_call_made_side_by_side_counts_as_the_task_that_made_it_most() -> None:
    # three tasks of one graph step (the graph's span "g", step 1) each read the guide once:
    # one read. Task b reads it twice more (3 in all, the most of any task): three reads,
    # and the alert holds the reads that counted
    guard = LoopGuard(repeat_threshold=3)
    guide = call("style_guide")
    for task in ("a", "b", "c"):
        assert guard.observe("t", guide, branches=[(("g", 1), task)]) is None
    assert guard.observe("t", guide, branches=[(("g", 1), "b")]) is None
    alert = guard.observe("t", guide, branches=[(("g", 1), "b")])
    assert alert is not None and (alert.pattern, alert.count) == ("repeated_call", 3)
    # the same reads in tasks of three steps one after another: three reads
    steps = LoopGuard(repeat_threshold=3)
    found = [steps.observe("t", guide, branches=[(("g", n), f"task-{n}")]) for n in (1, 2, 3)]
    assert found[:2] == [None, None] and found[2] is not None and found[2].count == 3
    # nested: two tasks of an outer step, each running an inner graph whose steps read the
    # guide once each. Task x reads it on two inner steps, y on three: three reads in all
    nested = LoopGuard(repeat_threshold=3)
    reads = [("x", 1), ("y", 1), ("x", 2), ("y", 2), ("y", 3)]
    found = [
        nested.observe(
            "t", guide, branches=[((f"inner-{task}", n), f"{task}{n}"), (("g", 1), task)]
        )
        for task, n in reads
    ]
    assert found[:4] == [None] * 4 and found[4] is not None and found[4].count == 3


@settings(max_examples=200, deadline=None)
@given(
    made=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=5),
    order=st.randoms(use_true_random=False),
)
def test_calls_of_a_steps_tasks_count_as_their_most_in_any_order(
    made: list[int], order: Any
) -> None:
    # task i of one graph step makes the same call made[i] times; in whatever order the
    # tasks' calls interleave, the run made it max(made) times: a loop exactly when that
    # reaches the threshold, with that many calls
    guard = LoopGuard(repeat_threshold=3)
    calls = [task for task, times in enumerate(made) for _ in range(times)]
    order.shuffle(calls)
    alerts = [
        alert
        for task in calls
        if (alert := guard.observe("t", call("guide"), branches=[(("g", 1), task)])) is not None
    ]
    most = max(made)
    assert [alert.count for alert in alerts] == ([3] if most >= 3 else [])


def test_tasks_on_other_input_share_a_step_and_a_task_redone_is_a_step_later() -> None:
    steps = TaskSteps()
    asked = {"name": "lookup", "args": {"order_id": "A-1"}, "type": "tool_call"}
    runs = iter(range(100))
    started = [
        steps.step("entry", "summarise", {"part": "a"}, next(runs)),
        steps.step("entry", "summarise", {"part": "b"}, next(runs)),
        steps.step("entry", "summarise", {"part": "a"}, next(runs)),
        steps.step("entry", "translate", {"part": "a"}, next(runs)),  # another task's first
        steps.step("other", "summarise", {"part": "a"}, next(runs)),  # another caller's first
        # the same call the model asked for again, under a new id: the same work again
        steps.step("entry", "run_call", {"call": {**asked, "id": "c1"}}, next(runs)),
        steps.step("entry", "run_call", {"call": {**asked, "id": "c2"}}, next(runs)),
        steps.step(
            "entry", "run_call", [{**asked, "id": "c3", "args": {"order_id": "B-2"}}], next(runs)
        ),
    ]
    assert started == [0, 0, 1, 0, 0, 0, 1, 0]
    # a run that raised, called again on its input: its retry policy's run, at its step
    fetch = steps.step("entry", "fetch", {"doc": "a"}, "f1")
    steps.ended("f1", raised=True)
    retried = steps.step("entry", "fetch", {"doc": "a"}, "f2")
    steps.ended("f2", raised=True)
    again = steps.step("entry", "fetch", {"doc": "a"}, "f3")
    steps.ended("f3")  # it worked: the same input once more is the same work again
    assert [fetch, retried, again, steps.step("entry", "fetch", {"doc": "a"}, "f4")] == [0, 0, 0, 1]
    steps.ended("entry")  # it ended: a new entry's tasks start again
    assert steps.step("entry", "summarise", {"part": "a"}, "s") == 0


def test_a_call_run_again_under_its_id_counts_once_until_the_model_asks_again() -> None:
    guard = LoopGuard(repeat_threshold=3)
    lookup = ToolCall(id="c1", name="lookup", arguments={"order_id": "A-1"})
    # its framework runs the call again (a retry after it raised): one call of the agent's
    assert [guard.observe("t", lookup) for _ in range(5)] == [None] * 5
    # the model asks again under the same id (a server that reuses ids): calls of their own
    guard.model_called("t")
    assert guard.observe("t", lookup) is None
    guard.model_called("t")
    alert = guard.observe("t", lookup)
    assert alert is not None and (alert.pattern, alert.count) == ("repeated_call", 3)
    # the same id with other arguments is another call, as is a call without an id
    other = LoopGuard(repeat_threshold=2)
    assert other.observe("t", lookup) is None
    assert other.observe("t", lookup.model_copy(update={"arguments": {"order_id": "B"}})) is None
    assert other.observe("t", lookup.model_copy(update={"id": None})) is not None


def test_another_agents_model_call_leaves_a_retry_one_call() -> None:
    # two agents of one run at once: the orders agent's model call between two runs of the
    # refunds agent's call made them two calls, and a third run a loop
    guard = LoopGuard(repeat_threshold=3)
    lookup = ToolCall(id="c1", name="lookup", arguments={"refund_id": "R-9"})
    for _ in range(3):
        assert guard.observe("t", lookup, agent="refunds") is None
        guard.model_called("t", "orders")
    # its own agent's model call, or one that names no agent, ends the retries
    guard.model_called("t", "refunds")
    assert guard.observe("t", lookup, agent="refunds") is None
    guard.model_called("t")
    alert = guard.observe("t", lookup, agent="refunds")
    assert alert is not None and (alert.pattern, alert.count) == ("repeated_call", 3)


def test_a_model_call_in_another_lane_leaves_a_retry_one_call() -> None:
    # two agents of one name sent at once: each in its lane, so the name does not tell them
    # apart; the other lane's model call between two runs of a call made them two calls
    guard = LoopGuard(repeat_threshold=3)
    lookup = ToolCall(id="c1", name="lookup", arguments={"job": "A"})
    for _ in range(3):
        assert guard.observe("t", lookup, agent="checker", lane="a") is None
        guard.model_called("t", "checker", lane="b")
    # a model call in its own lane, or in none by an agent of its name, ends the retries
    guard.model_called("t", "checker", lane="a")
    assert guard.observe("t", lookup, agent="checker", lane="a") is None
    guard.model_called("t", "checker")
    alert = guard.observe("t", lookup, agent="checker", lane="a")
    assert alert is not None and (alert.pattern, alert.count) == ("repeated_call", 3)


def test_short_cycles_alert() -> None:
    guard = LoopGuard(repeat_threshold=5)
    results = [guard.observe("t", call(name, n=1)) for name in ["open", "read", "open", "read"]]
    assert results[:3] == [None, None, None]
    assert results[3] is not None and results[3].pattern == "cycle"
    assert results[3].message == "cycle open → read repeated 2 times"
    three = LoopGuard(repeat_threshold=5)
    names = ["a", "b", "c", "a", "b", "c"]
    assert [three.observe("t", call(n)) is not None for n in names] == [False] * 5 + [True]


def test_a_flush_first_drains_the_frameworks_that_deliver_on_their_own_thread() -> None:
    problems: list[tuple[str, str, str]] = []
    recorder = Recorder(
        on_trace=lambda trace: None,
        on_alert=lambda alert: None,
        on_problem=lambda kind, exc, consequence: problems.append((kind, str(exc), consequence)),
    )
    handled: list[str] = []
    waits: list[float | None] = []

    def bus_drain(timeout: float | None) -> bool:
        waits.append(timeout)
        recorder.put((lambda event: handled.append(event[1]), "delivered late"))
        return True

    def broken_drain(timeout: float | None) -> bool:
        raise RuntimeError("bus gone")

    recorder.drain_before_flush(bus_drain)
    recorder.drain_before_flush(broken_drain)
    assert recorder.flush(None)
    assert recorder.flush(5.0)
    assert handled == ["delivered late", "delivered late"]  # put by the drain, then handled
    assert waits[0] is None and waits[1] is not None and 4.0 < waits[1] <= 5.0
    assert (
        problems == [("event delivery", "bus gone", "a flush went on without waiting for it")] * 2
    )
    recorder.forget_drain(bus_drain)
    recorder.forget_drain(broken_drain)
    recorder.forget_drain(broken_drain)  # twice: nothing
    assert recorder.flush(5.0) and len(waits) == 2 and len(problems) == 2
    recorder.drain_before_flush(lambda timeout: False)  # the framework's wait timed out
    assert recorder.flush(5.0) is False
    recorder.close(5)


def test_an_event_put_after_drains_follows_what_the_framework_still_delivers() -> None:
    # a session's end after a CrewAI kickoff that returned with its last event still on
    # the bus: the end waits for it on a thread of its own, and what follows waits in turn
    recorder = Recorder(on_trace=lambda trace: None, on_alert=lambda alert: None)
    handled: list[str] = []

    def handle(event: tuple[Any, ...]) -> None:
        handled.append(event[1])

    released = threading.Event()
    on_the_bus = ["the run's last event"]

    def bus_drain(timeout: float | None) -> bool:
        assert released.wait(10)
        while on_the_bus:
            recorder.put((handle, on_the_bus.pop()))
        return True

    recorder.drain_before_flush(bus_drain)
    recorder.put_after_drains((handle, "the session's end"))  # returns at once
    recorder.put_after_drains((handle, "a run submitted after it"))
    assert handled == []  # both wait on the bus
    released.set()
    assert recorder.flush(10)
    assert handled == ["the run's last event", "the session's end", "a run submitted after it"]
    recorder.forget_drain(bus_drain)
    recorder.put_after_drains((handle, "no framework to wait for"))  # queued there and then
    assert recorder.flush(10) and handled[-1] == "no framework to wait for"
    recorder.close(5)


def test_guard_refusal_is_recorded_on_the_trace_and_alerts_arrive_on_one_thread() -> None:
    finished: list[Trace] = []
    alerts: list[tuple[LoopAlert, str]] = []
    recorder = Recorder(
        on_trace=finished.append,
        on_alert=lambda alert: alerts.append((alert, threading.current_thread().name)),
    )
    assembler = recorder.assembler("test", watch_loops=False)

    def record(event: tuple[Any, ...]) -> None:
        action, key, *rest = event[1:]
        if action == "start":
            parent, tool_call = rest
            kind = SpanKind.TOOL if tool_call else SpanKind.AGENT
            assembler.start_span(key, parent, kind, key, tool_call=tool_call, start_time=1.0)
        else:
            assembler.end_span(key, output=rest[0], end_time=2.0)

    def refuser(key: str) -> Any:
        return lambda event: assembler.refuse(key, event[1])

    recorder.put((record, "start", "root", None, None))
    refused_at = None
    for index in range(4):
        key = f"tool{index}"
        lookup = call("lookup", id=7)
        recorder.put((record, "start", key, "root", lookup))
        alert = recorder.check_tool_call("root", lookup, refuse=refuser(key))
        if alert is None:
            recorder.put((record, "end", key, "found"))
        elif refused_at is None:
            refused_at = index
    recorder.put((record, "end", "root", "gave up"))
    assert recorder.flush(5)
    assert refused_at == 2  # the third identical call, before it ran
    [trace] = finished
    assert trace.status is RunStatus.STOPPED
    assert trace.status_reason == (
        'stopped by the loop guard: lookup called 3 times with the same arguments {"id": 7}'
    )
    [alert] = trace.alerts
    assert alert.stopped and alert.trace_id == trace.id and alert.count == 3
    tools = [span for span in trace.spans if span.kind is SpanKind.TOOL]
    assert [(s.output, s.error, s.attributes.get(GUARD_REFUSED)) for s in tools] == [
        ("found", None, None),
        ("found", None, None),
        (None, f"refused by the loop guard: {alert.message}", True),
        (None, f"refused by the loop guard: {alert.message}", True),  # the run stays stopped
    ]
    # one alert, delivered on the recorder's thread; the run's guard state is gone
    assert [(a.pattern, thread) for a, thread in alerts] == [
        ("repeated_call", "agenteval-recorder")
    ]
    assert len(recorder.guard) == 0
    recorder.close(5)


# --- online evaluator --------------------------------------------------------------------------


def trace(output: str, session: str = "s1", **fields: Any) -> Trace:
    return Trace(input="Where is my order?", output=output, session_id=session, **fields)


class BrokenMetric(Metric):
    """Always raises."""

    name = "broken"
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        raise RuntimeError("metric bug")


def test_results_session_signals_and_cross_trace_loop_alert(tmp_path: Path) -> None:
    results: list[tuple[Trace, TraceResults]] = []
    alerts: list[LoopAlert] = []
    stuck = "I am still looking up your order, please wait a moment."
    with OnlineEvaluator(
        capture=tmp_path / "c.jsonl",
        results_path=tmp_path / "r.jsonl",
        on_result=lambda trace, outcome: results.append((trace, outcome)),
        on_alert=alerts.append,
    ) as evaluator:
        for output in ["Your order shipped yesterday.", stuck, stuck]:
            evaluator.submit(trace(output))
        assert evaluator.flush(10)
    captured = list(read_capture(tmp_path / "c.jsonl"))
    assert (
        [t.id for t, _ in results] == [r.trace_id for _, r in results] == [t.id for t in captured]
    )
    assert [t.output for t, _ in results] == [t.output for t in captured]
    loops = [next(x for x in r.results if x.name == "loop_detection").score for _, r in results]
    assert loops[0] == 1.0 and loops[2] == pytest.approx(0.0, abs=1e-6)
    assert [a.pattern for a in alerts] == ["loop_detection"]
    reliability = next(r for r in results[-1][1].session_results if r.name == "agent_reliability")
    assert reliability.metadata["traces_evaluated"] == 3
    # one line per trace with its own results, then one for the session when it closed
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [line.get("trace_id") for line in lines] == [t.id for t in captured] + [None]
    assert lines[-1]["session_id"] == "s1"
    assert {r["name"] for r in lines[-1]["session_results"]} == {
        "agent_reliability",
        "agent_consistency",
    }


def test_an_evaluator_counts_sessions_cut_by_its_open_sessions_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # one session open at most, one trace per batch (flushed between): b0 closes a after
    # its batch, a1 opens a again (cut 1) and closes b, b1 opens b again (cut 2); the
    # warning comes once
    parts: list[tuple[str, int]] = []
    with (
        caplog.at_level("WARNING", logger="agenteval"),
        OnlineEvaluator(
            capture=None,
            log=False,
            max_open_sessions=1,
            sinks=[
                CallbackSink(
                    lambda trace, results: None,
                    on_session=lambda session, results: parts.append(
                        (session, results[0].metadata["total_traces_in_session"])
                    ),
                )
            ],
        ) as evaluator,
    ):
        for name in ("a0", "b0", "a1", "b1"):
            evaluator.submit(Trace(id=name, input="q", output=name, session_id=name[0]))
            assert evaluator.flush(10)
        assert evaluator.stats.sessions_cut == 2
    assert parts == [("a", 1), ("b", 1), ("a", 1), ("b", 1)]
    assert [r.getMessage() for r in caplog.records if "cut in two" in r.getMessage()] == [
        "agenteval: a session was cut in two: more than 1 sessions were open at once, so the "
        "least recently active closed, and one of them met another trace; its session "
        "metrics are given for each part (stats.sessions_cut counts these times); raise "
        "OnlineEvaluator(max_open_sessions=...) above the sessions active at once"
    ]


def test_online_results_file_grows_linearly(tmp_path: Path) -> None:
    sizes = {}
    for count in (50, 200):
        results = tmp_path / f"r{count}.jsonl"
        with OnlineEvaluator(
            capture=tmp_path / f"c{count}.jsonl", results_path=results, log=False
        ) as evaluator:
            for index in range(count):
                evaluator.submit(trace(f"Order {index} shipped on day {index}.", session="one"))
            assert evaluator.flush(60)
        lines = results.read_text().splitlines()
        assert len(lines) == count + 1  # each trace once, the session once
        sizes[count] = results.stat().st_size
    # every trace line holds the same metrics, so 4× the traces is 4× the bytes (± the one
    # session line and the digits)
    assert 3.8 < sizes[200] / sizes[50] < 4.1, sizes


def test_an_evaluator_captures_into_a_directory_of_shards(tmp_path: Path) -> None:
    submitted = [trace(f"answer {i}", session=f"s{i % 5}") for i in range(20)]
    with OnlineEvaluator(capture=tmp_path / "capture", capture_shards=3, log=False) as ev:
        for item in submitted:
            ev.submit(item)
        captured = ev.captured()
    assert ev.capture_path == tmp_path / "capture"
    assert sorted(p.name for p in ev.capture_path.iterdir()) == [
        f"part-0000{i}-of-00003.jsonl" for i in range(3)
    ]
    assert sorted(t.id for t in captured) == sorted(t.id for t in submitted)
    # shard by shard, each session's traces in the order they were submitted
    for session in {t.session_id for t in submitted}:
        assert [t.id for t in captured if t.session_id == session] == [
            t.id for t in submitted if t.session_id == session
        ]
    assert ev.stats.captured == 20 and ev.stats.scored == 20


def test_captured_holds_the_evaluators_own_runs_past_what_earlier_processes_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # an earlier process's run, and the fragment of one it was killed writing: the file's,
    # not this evaluator's
    capture = tmp_path / "c.jsonl"
    earlier = trace("before the kill")
    capture.write_text(earlier.model_dump_json() + "\n" + earlier.model_dump_json()[:50])
    with OnlineEvaluator(capture=capture, log=False) as ev:
        submitted = trace("after the restart", session="s")
        ev.submit(submitted)
        with caplog.at_level("WARNING", logger="agenteval"):
            [captured] = ev.captured()
    assert (captured.id, captured.output) == (submitted.id, "after the restart")
    assert caplog.records == []
    problems: list[CaptureFormatError] = []
    assert [t.output for t in read_capture(capture, on_error=problems.append)] == [
        "before the kill",
        "after the restart",
    ]
    assert [str(problem) for problem in problems] == [
        f"{capture}:2: truncated line (its writer stopped mid-line)"
    ]


def test_a_buffered_results_file_writes_whole_lines_in_chunks_and_the_rest_at_close(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.jsonl"
    sink = ResultsFileSink(path, buffer_size=1000)
    traces = [trace(f"answer {index}", session="s") for index in range(43)]
    sizes = []
    for item in traces:
        sink.trace_scored(item, TraceResults(trace_id=item.id, session_id="s", results=[]))
        sizes.append(path.stat().st_size)
    sink.close()
    lines = path.read_bytes().splitlines(keepends=True)
    assert [json.loads(line)["trace_id"] for line in lines] == [t.id for t in traces]
    # the file's size after each trace: nothing until 1000 bytes had collected, then all
    # the lines collected so far, written at once; the rest at close
    ends = [sum(len(line) for line in lines[: index + 1]) for index in range(len(lines))]
    expected, written = [], 0
    for end in ends:
        if end - written >= 1000:
            written = end
        expected.append(written)
    assert sizes == expected and 0 < expected[-1] < ends[-1]


class GatedMetric(Metric):
    """Blocks until the test opens the gate, like a judge that has stalled."""

    name = "gated"
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC
    blocking = True  # the engine runs it on a worker thread
    gate = threading.Event()

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        self.gate.wait(10)
        return Score(1.0)


def test_full_hand_off_drops_from_scoring_never_from_capture(tmp_path: Path) -> None:
    # The hand-off holds 2 traces until they are scored; scoring is stalled, so 18 of 20
    # are dropped from scoring, decided on the submitting thread. All 20 are captured.
    gated = GatedMetric()
    gated.gate.clear()
    evaluator = OnlineEvaluator(
        capture=tmp_path / "c.jsonl",
        metrics=[gated],
        session_metrics=[],
        queue_size=2,
        batch_size=1,
        batch_delay=0.0,
    )
    submitted = [trace(f"answer {i}", session=f"s{i}") for i in range(20)]
    for item in submitted:
        evaluator.submit(item)
    stats = evaluator.stats
    assert stats.dropped_from_scoring == 18  # before anything was scored
    gated.gate.set()
    assert evaluator.flush(10)
    evaluator.close()
    assert [t.id for t in read_capture(tmp_path / "c.jsonl")] == [t.id for t in submitted]
    assert stats.captured == 20 and stats.scored == 2 and stats.dropped_from_scoring == 18
    assert stats.unscored_trace_ids == [t.id for t in submitted[2:]]


def test_failing_metrics_and_sinks_are_counted_not_raised(tmp_path: Path) -> None:
    def bad_callback(trace: Trace, results: TraceResults) -> None:
        raise ValueError("sink bug")

    seen: list[TraceResults] = []
    with OnlineEvaluator(
        capture=tmp_path / "c.jsonl", metrics=[BrokenMetric(), "coherence"], on_result=bad_callback
    ) as evaluator:
        evaluator.add_sink(CallbackSink(lambda trace, results: seen.append(results)))
        evaluator.submit(trace("fine"))
        assert evaluator.flush(10)
    assert evaluator.stats.metric_errors == 1 and evaluator.stats.callback_errors == 1
    broken = next(r for r in seen[0].results if r.name == "broken")
    assert broken.score is None and broken.error == "RuntimeError: metric bug"
    assert next(r for r in seen[0].results if r.name == "coherence").score is not None


def test_live_tool_alert_is_delivered_within_milliseconds(tmp_path: Path) -> None:
    got = threading.Event()
    evaluator = OnlineEvaluator(capture=tmp_path / "c.jsonl", on_alert=lambda alert: got.set())
    for _ in range(3):
        evaluator.recorder.check_tool_call("run", call("search", q="same"), refuse=lambda e: None)
    assert got.wait(1)  # delivered on the recorder's thread right away
    evaluator.close()


def test_exit_without_close_loses_no_captured_trace(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        from agenteval_core import OnlineEvaluator, Trace
        evaluator = OnlineEvaluator(capture={str(tmp_path / "c.jsonl")!r},
                                    results_path={str(tmp_path / "r.jsonl")!r})
        for i in range(50):
            evaluator.submit(Trace(input="q", output=f"answer {{i}}", session_id="s"))
        # no flush, no close: the exit hook must finish the work
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert len(list(read_capture(tmp_path / "c.jsonl"))) == 50
    # 50 trace lines, and the session's line written when the exit hook closed it
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 51


def test_a_forked_child_scores_its_own_traces(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os
        import warnings
        from agenteval_core import OnlineEvaluator, Trace
        # Python 3.12+ warns on any fork of a process with threads: the case under test
        warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
        evaluator = OnlineEvaluator(capture={str(tmp_path / "c.jsonl")!r}, log=False)
        evaluator.submit(Trace(input="q", output="parent", session_id="p"))
        assert evaluator.flush(30)
        pid = os.fork()
        if pid == 0:
            gc.collect()  # what the child no longer runs (the parent's loop) is freed here
            evaluator.submit(Trace(input="q", output="child", session_id="c"))
            ok = evaluator.flush(30) and evaluator.stats.scored == 2
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        raise SystemExit(os.waitstatus_to_exitcode(status))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", "import gc\n" + script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # nothing on stderr: asyncio said "Task was destroyed but it is pending!" in every worker
    assert done.stderr == ""
    assert [t.output for t in read_capture(tmp_path / "c.jsonl")] == ["parent", "child"]


def test_a_forked_child_does_not_capture_the_parents_runs_in_flight(tmp_path: Path) -> None:
    # a run open in the parent at fork() is the parent's: the child, closing, finished
    # its copy as it stood and wrote it to the capture the two share
    script = textwrap.dedent(
        f"""
        import os, threading
        from agenteval_core import OnlineEvaluator, SpanKind
        evaluator = OnlineEvaluator(capture={str(tmp_path / "c.jsonl")!r}, log=False)
        assembler = evaluator.recorder.assembler("test")
        opened = threading.Event()
        def start(event):
            assembler.start_span("root", None, SpanKind.AGENT, "agent", input="parent's")
            opened.set()
        evaluator.recorder.pump.put((start,))
        assert opened.wait(30)
        pid = os.fork()
        if pid == 0:
            evaluator.close()
            os._exit(0)
        os.waitpid(pid, 0)
        evaluator.close()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    [trace] = read_capture(tmp_path / "c.jsonl")
    assert (trace.input, trace.status_reason) == (
        "parent's",
        "still running when the evaluator closed: recorded as it stood",
    )


class HeldMetric(Metric):
    """Holds the traces whose output names an event until the test sets it."""

    name = "held"
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC
    blocking = True  # on a worker thread: the scoring loop goes on meanwhile
    gates: ClassVar[dict[str, threading.Event]] = {}

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        gate = self.gates.get(str(case.actual_output))
        if gate is not None:
            gate.wait(20)
        return Score(1.0)


def test_a_flush_waits_for_what_was_handed_over_before_it_only(tmp_path: Path) -> None:
    # a busy server: a request's flush waited until no trace at all was being scored, so
    # other requests' traces, arriving all the time, held it for as long as they came
    before, later = threading.Event(), threading.Event()
    HeldMetric.gates = {"before": before, "later": later}
    evaluator = OnlineEvaluator(
        capture=tmp_path / "c.jsonl", metrics=[HeldMetric()], session_metrics=[], log=False
    )
    try:
        evaluator.submit(trace("before", session="a"))
        flushed: list[bool] = []
        flusher = threading.Thread(target=lambda: flushed.append(evaluator.flush(20)))
        flusher.start()
        assert evaluator._hurry.wait(10)  # the flush waits for "before"
        evaluator.submit(trace("later", session="b"))  # handed over after the flush began
        before.set()
        flusher.join(20)
        assert flushed == [True]
        assert (evaluator.stats.submitted, evaluator.stats.scored) == (2, 1)  # "later" waits
    finally:
        later.set()
        evaluator.close()
    assert evaluator.stats.scored == 2


class ClosedSink(Sink):
    """Says when the evaluator closed it: the last thing a close does."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


@pytest.mark.parametrize("callback", ["on_result", "on_alert"])
def test_a_callback_may_close_the_evaluator(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, callback: str
) -> None:
    # "stop recording on the first loop": the close waited for the very thread it ran on,
    # gave up after its timeout, left the evaluator open and failed the callback
    ended = ClosedSink()

    def close(*_: object) -> None:
        evaluator.close(10)

    evaluator = OnlineEvaluator(
        capture=tmp_path / "c.jsonl",
        results_path=tmp_path / "r.jsonl",
        sinks=[ended],
        log=False,
        **{callback: close},  # type: ignore[arg-type]
    )
    with caplog.at_level("WARNING", logger="agenteval"):
        evaluator.submit(trace("an answer", session="s"))
        if callback == "on_alert":
            assert evaluator.flush(10)
            evaluator.recorder.deliver_alert(
                LoopAlert(
                    session_id="s", trace_id="t", pattern="repeated_call", count=3, message="looped"
                )
            )
        assert ended.closed.wait(20)
    assert evaluator._closed and caplog.records == []
    stats = evaluator.stats
    assert (stats.submitted, stats.captured, stats.scored, stats.callback_errors) == (1, 1, 1, 0)
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [("results" in line, "session_results" in line) for line in lines] == [
        (True, False),
        (False, True),
    ]


def test_a_flush_from_a_callback_returns_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # it waited for scoring on the thread scoring needs: the loop stood still for the whole
    # timeout, and for ever without one
    flushed: list[bool] = []

    def on_result(trace: Trace, results: TraceResults) -> None:
        flushed.append(evaluator.flush(5))

    evaluator = OnlineEvaluator(capture=tmp_path / "c.jsonl", on_result=on_result, log=False)
    with caplog.at_level("WARNING", logger="agenteval"):
        for output in ("first", "second"):
            evaluator.submit(trace(output, session="s"))
        assert evaluator.flush(20)
    evaluator.close()
    assert flushed == [False, False] and evaluator.stats.scored == 2
    assert [r.getMessage() for r in caplog.records] == [
        "agenteval: flush() was called from a callback on the evaluator's own thread, where "
        "it cannot wait for scoring; it returned False. Flush from your own code"
    ]


def test_close_accounts_for_every_captured_trace(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # scoring stalls; close gives it 0.5 s: what was not scored is counted and listed
    gated = GatedMetric()
    gated.gate.clear()
    evaluator = OnlineEvaluator(
        capture=tmp_path / "c.jsonl",
        results_path=tmp_path / "r.jsonl",
        metrics=[gated],
        session_metrics=[],
        log=False,
    )
    submitted = [trace(f"answer {i}", session=f"s{i}") for i in range(5)]
    for item in submitted:
        evaluator.submit(item)
    evaluator.close(timeout=0.5)
    gated.gate.set()
    stats = evaluator.stats
    assert stats.captured == 5 and stats.scored == 0
    assert stats.captured == stats.scored + stats.dropped_from_scoring
    assert stats.unscored_trace_ids == [t.id for t in submitted]
    # the results file marks each of them, so a later replay knows what to score
    marks = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert marks == [
        {
            "results_version": 1,
            "trace_id": t.id,
            "unscored": "not scored before the evaluator closed",
        }
        for t in submitted
    ]
    # the scoring tasks cancelled at close are not errors of anyone's
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


def test_a_trace_finished_after_close_is_counted_and_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # an agent thread still running when the evaluator closed (at exit): its capture is
    # closed, so its traces are lost; they are counted, never missing from the sums
    evaluator = OnlineEvaluator(
        capture=tmp_path / "c.jsonl", results_path=tmp_path / "r.jsonl", log=False
    )
    before = trace("in time", session="s")
    evaluator.submit(before)
    evaluator.close()
    late = [trace(f"late {i}", session="s") for i in range(2)]
    with caplog.at_level("WARNING", logger="agenteval"):
        for item in late:
            evaluator.submit(item)
    stats = evaluator.stats
    assert (stats.submitted, stats.captured, stats.capture_errors) == (3, 1, 2)
    assert (stats.scored, stats.dropped_from_scoring) == (1, 2)
    assert stats.uncaptured_trace_ids == stats.unscored_trace_ids == [t.id for t in late]
    assert stats.problems == {}
    assert [r.getMessage() for r in caplog.records] == [
        f"agenteval: trace {late[0].id} finished after the evaluator was closed: neither "
        "captured nor scored (counted, with any later ones, in stats.capture_errors and "
        "stats.dropped_from_scoring); close the evaluator after the agent's last run"
    ]
    assert [t.output for t in read_capture(tmp_path / "c.jsonl")] == ["in time"]


class LoopHoggingMetric(Metric):
    """A slow metric not marked ``blocking``: it holds the scoring loop while it runs, so
    closing the sessions and stopping the loop wait behind it too."""

    name = "loop_hog"
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC
    gate = threading.Event()

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        self.gate.wait(3)
        return Score(1.0)


@pytest.mark.parametrize("captured", [True, False])
def test_close_keeps_one_deadline_for_all_its_stages(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, captured: bool
) -> None:
    hog = LoopHoggingMetric()
    hog.gate.clear()
    capture = tmp_path / "c.jsonl" if captured else None
    evaluator = OnlineEvaluator(capture=capture, metrics=[hog], session_metrics=[], log=False)
    evaluator.submit(trace("answer", session="s"))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agenteval"):
        evaluator.close(timeout=0.5)
    elapsed = time.monotonic() - started
    hog.gate.set()
    # flushing, closing the sessions and stopping the loop each waited the whole timeout in
    # turn (1.5 s here); one deadline is shared by all of them
    assert elapsed < 0.5 + 0.3, elapsed
    assert evaluator.stats.dropped_from_scoring == 1
    messages = [record.getMessage() for record in caplog.records]
    assert (
        "agenteval: the open sessions were not closed within close(timeout=0.5); their final "
        "session results were not delivered"
    ) in messages
    replay = (
        f"`agenteval replay {capture}` scores them"
        if captured
        else "nothing was captured to replay them from (capture=None)"
    )
    assert (
        "agenteval: 1 trace(s) were not scored before close; their ids are in "
        f"stats.unscored_trace_ids, and {replay}"
    ) in messages


def test_sigterm_captures_and_scores_every_finished_trace(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, threading
        from agenteval_core import OnlineEvaluator, Trace
        evaluator = OnlineEvaluator(capture={str(tmp_path / "c.jsonl")!r},
                                    results_path={str(tmp_path / "r.jsonl")!r}, log=False,
                                    close_on_sigterm=True)
        for i in range(30):
            evaluator.submit(Trace(input="q", output=f"answer {{i}}", session_id="s"))
        # the signal lands while the main thread holds a lock close() needs (the capture
        # file's, as in the middle of a write): the handler takes none and returns
        with evaluator._capture._lock:
            os.kill(os.getpid(), signal.SIGTERM)
            print("the main thread went on", flush=True)
        threading.Event().wait(60)  # until SIGTERM ends the process
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], timeout=120, capture_output=True, text=True
    )
    assert done.returncode == -15, done.stderr  # it still ends the default way
    assert done.stdout == "the main thread went on\n"
    assert len(list(read_capture(tmp_path / "c.jsonl"))) == 30
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 31  # every trace scored, and the session closed


def test_sigterm_is_left_alone_unless_asked_and_a_handler_of_the_users_always(
    tmp_path: Path,
) -> None:
    script = textwrap.dedent(
        f"""
        import signal, sys
        from agenteval_core import OnlineEvaluator
        OnlineEvaluator(capture={str(tmp_path / "a.jsonl")!r}, log=False)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        mine = lambda signum, frame: sys.exit(7)
        signal.signal(signal.SIGTERM, mine)
        OnlineEvaluator(capture={str(tmp_path / "b.jsonl")!r}, log=False, close_on_sigterm=True)
        assert signal.getsignal(signal.SIGTERM) is mine
        """
    )
    assert subprocess.run([sys.executable, "-c", script], timeout=120).returncode == 0


def test_the_console_sink_prints_a_line_per_trace_and_a_closing_summary(tmp_path: Path) -> None:
    import io

    out = io.StringIO()
    capture, results = tmp_path / "c.jsonl", tmp_path / "r.jsonl"
    stopped = trace("", status=RunStatus.STOPPED, id="stopped-run")
    with OnlineEvaluator(
        capture=capture,
        results_path=results,
        metrics=["tool_call_loops", "tool_call_accuracy"],
        session_metrics=[],
        sinks=[ConsoleSink(out)],
        log=False,
    ) as evaluator:
        evaluator.submit(trace("Your order shipped yesterday.", id="fine-run-1"))
        assert evaluator.flush(10)
        evaluator.submit(stopped)
        assert evaluator.flush(10)
    lines = out.getvalue().splitlines()
    # a metric that gives no score says why, once: not on every line of a long session
    assert lines[:2] == [
        "agenteval: trace fine-run session s1 [ok] tool_call_loops 1.00, not scored: "
        "tool_call_accuracy (no expectation: the case gives no expected_tool_calls)",
        "agenteval: trace stopped- session s1 [stopped] not scored: tool_call_loops (no tool "
        "calls in a run that did not complete (stopped)), tool_call_accuracy",
    ]
    assert lines[2:] == [
        "agenteval: 2 trace(s) scored, 0 with failing metrics, 1 that did not complete; "
        "0 loop alert(s)",
        f"agenteval: capture {capture}, results {results}; open the report with: "
        f"agenteval report {results} --capture {capture}",
    ]


def test_running_session_results_are_built_only_for_a_sink_that_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each is a pass over the session's traces: a long session paid it on every trace for
    # the console, the log and the results file, which read none of them
    import io

    from agenteval_core.metrics import IncrementalSession

    built: list[str] = []
    snapshot = IncrementalSession.snapshot

    def counted(self: IncrementalSession, session_id: str | None = None) -> MetricResult:
        built.append(self.metric.name)
        return snapshot(self, session_id)

    monkeypatch.setattr(IncrementalSession, "snapshot", counted)
    seen: list[TraceResults] = []
    for on_result in (None, lambda trace, results: seen.append(results)):
        with OnlineEvaluator(
            capture=tmp_path / "c.jsonl",
            results_path=tmp_path / "r.jsonl",
            metrics=["tool_call_loops"],
            sinks=[ConsoleSink(io.StringIO())],
            on_result=on_result,
            on_alert=lambda alert: None,
        ) as evaluator:
            evaluator.submit(trace("Your order shipped yesterday.", id="t1"))
            evaluator.submit(trace("It arrives on Monday.", id="t2"))
            assert evaluator.flush(10)
        if on_result is None:
            assert built == []  # yet the results file has each trace's session scores
            lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
            assert [line["session_scores"] for line in lines if "results" in line] == [
                {"agent_reliability": 1.0, "agent_consistency": None}
            ] * 2
    # a callback may read them: after each trace, both session metrics
    assert built == ["agent_reliability", "agent_consistency"] * 2
    assert [[r.name for r in results.session_results] for results in seen] == [
        ["agent_reliability", "agent_consistency"]
    ] * 2
    assert [results.session_results[0].score for results in seen] == [1.0, 1.0]


def test_failures_of_our_own_are_counted_and_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A guard that raises (stop_on_loop is then off for that call), a submit that fails, a
    sink that fails: each counted in stats.problems and logged at WARNING once per kind."""
    import hotel_agent
    from agenteval_langchain import AgentEvalCallbackHandler

    def refuse_everything(*args: object, **kwargs: object) -> None:
        raise RuntimeError("guard bug")

    evaluator = OnlineEvaluator(capture=tmp_path / "c.jsonl", log=False, queue_size=0)
    evaluator.recorder.guard.observe = refuse_everything  # type: ignore[method-assign]
    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=True)
    with caplog.at_level(logging.WARNING, logger="agenteval"):
        for _ in range(2):  # two runs, one tool call each: the agent is never stopped
            answer = hotel_agent.run("Book a hotel in Rome", handler)
            assert answer is not None and answer.startswith("I booked a hotel in Rome")
        assert evaluator.recorder.flush(10)  # both traces handed over before the sink joins

        class Broken(Sink):
            def trace_unscored(self, trace_id: str, reason: str) -> None:
                raise OSError("disk gone")

        evaluator.engine.sinks.append(Broken())
        evaluator.redactor = None
        evaluator.submit(trace("x"))  # the hand-off is full (queue_size=0): an unscored mark
        evaluator.submit("not a trace")  # type: ignore[arg-type]
        evaluator.close(10)
    assert evaluator.stats.problems == {"loop guard": 2, "sink": 1, "submit": 1}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    said = [w for w in warnings if "counted in stats.problems" in w]
    assert said == [
        "agenteval: loop guard failed (RuntimeError: guard bug): this tool call was not "
        "checked for a loop; counted in stats.problems['loop guard'], logged once",
        f"agenteval: sink failed (OSError: disk gone): {evaluator.engine.sinks[-1]!r} did not "
        "take an unscored mark; counted in stats.problems['sink'], logged once",
        "agenteval: submit failed (AttributeError: 'str' object has no attribute 'id'): a "
        "trace was neither captured nor scored; counted in stats.problems['submit'], logged once",
    ]


def test_a_judge_metric_without_a_judge_is_refused_when_the_evaluator_is_made() -> None:
    """It would skip every trace, and the console would say only ``not scored``."""
    with pytest.raises(MetricInputError) as refused:
        OnlineEvaluator(capture=None, metrics=["tool_call_loops", "task_completion"], log=False)
    assert str(refused.value) == (
        "task_completion needs a judge: pass judge=OpenAIJudge(...) (from the command line: "
        "--judge-model), or leave the metric out"
    )


def test_a_judge_that_fails_every_trace_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a wrong judge URL failed every judged trace without a word at WARNING: only
    # stats.metric_errors grew, and a service ran for days scoring nothing with its judge
    with socket.socket() as closed:  # a port where nothing listens
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    judge = OpenAIJudge("gpt-4o-mini", base_url=url, api_key="sk-test", max_retries=0, cache=None)
    with (
        caplog.at_level(logging.WARNING, logger="agenteval"),
        OnlineEvaluator(capture=None, log=False, metrics=["confidence"], judge=judge) as evaluator,
    ):
        for output in ("one", "two", "three"):
            evaluator.submit(Trace(id=output, input="q", output=output))
        assert evaluator.flush(30)
    assert evaluator.stats.metric_errors == 3
    assert [r.getMessage() for r in caplog.records if "could not score" in r.getMessage()] == [
        "agenteval: confidence could not score trace one: judge unavailable: gave up after 1 "
        f"attempts; last: connection error (ConnectError) to {url}/chat/completions; later "
        "results that fail this way (unavailable) are counted in stats.metric_errors, not logged"
    ]
