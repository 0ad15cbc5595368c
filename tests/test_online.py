"""The event pump, trace assembler, live loop monitor and online evaluator."""

from __future__ import annotations

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

from agenteval_core import EvalCase, Metric, MetricKind, Score, SpanKind, ToolCall, Trace
from agenteval_core._capture import read_capture
from agenteval_core._online import LiveLoopMonitor, LoopAlert, OnlineEvaluator, TraceResults
from agenteval_core._recorder import EventPump, ToolStart, TraceAssembler


def call_start(trace_id: str, name: str, **arguments: Any) -> ToolStart:
    return ToolStart(
        trace_id, trace_id, "s", name, ToolCall(name=name, arguments=arguments), time.time()
    )


# --- assembler --------------------------------------------------------------------------------


def test_assembler_builds_one_trace_with_parent_links() -> None:
    finished: list[Trace] = []
    starts: list[ToolStart] = []
    assembler = TraceAssembler("test", finished.append, on_tool_start=starts.append)
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
    assert starts[0].trace_id == trace.id and starts[0].tool_call.name == "lookup"
    assert assembler.open_traces() == 0


def test_children_still_open_at_root_end_are_kept_with_a_note() -> None:
    finished: list[Trace] = []
    assembler = TraceAssembler("test", finished.append)
    assembler.start_span("root", None, SpanKind.AGENT, "agent")
    assembler.start_span("child", "root", SpanKind.TOOL, "slow", tool_call=ToolCall(name="slow"))
    assembler.end_span("root", error="RuntimeError: boom")
    assembler.end_span("child", output="late")  # after the trace finished: ignored, counted
    [trace] = finished
    assert trace.error == "RuntimeError: boom"
    assert trace.spans[1].error == "not ended before its run ended"
    assert assembler.unknown_ends == 1


def test_open_runs_are_bounded() -> None:
    finished: list[Trace] = []
    assembler = TraceAssembler("test", finished.append, max_open_runs=10)
    for index in range(25):
        assembler.start_span(f"root{index}", None, SpanKind.AGENT, "never ends")
    assert assembler.open_traces() <= 10 and assembler.evicted == 15
    assert all(trace.error == "evicted: the run never ended" for trace in finished)


events = st.lists(
    st.tuples(
        st.sampled_from(["start", "end", "error"]),
        st.integers(0, 6),
        st.one_of(st.none(), st.integers(0, 6)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(sequence=events)
def test_odd_event_sequences_never_raise_and_lose_no_finished_run(
    sequence: list[tuple[str, int, int | None]],
) -> None:
    finished: list[Trace] = []
    assembler = TraceAssembler("test", finished.append)
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
        if event[0] == 3:
            raise ValueError("bad event")
        seen.append(event[0])

    pump = EventPump(handle)
    for index in range(6):
        pump.put((index,))
    assert pump.flush(5)
    assert seen == [0, 1, 2, 4, 5] and pump.errors == 1
    pump.close(5)


# --- live loop monitor -----------------------------------------------------------------------


def test_repeated_identical_call_alerts_at_the_threshold_once() -> None:
    alerts: list[LoopAlert] = []
    monitor = LiveLoopMonitor(repeat_threshold=3, on_alert=alerts.append)
    assert monitor.observe(call_start("t", "search", q="x")) is None
    assert monitor.observe(call_start("t", "search", q="y")) is None  # other arguments
    assert monitor.observe(call_start("t", "search", q="x")) is None
    alert = monitor.observe(call_start("t", "search", q="x"))
    assert alert is not None and alert.pattern == "repeated_call" and alert.count == 3
    assert [c.arguments for c in alert.calls] == [{"q": "x"}] * 3
    assert monitor.observe(call_start("t", "search", q="x")) is None  # once per loop
    assert alerts == [alert]
    assert monitor.observe(call_start("other-run", "search", q="x")) is None  # runs don't mix


def test_short_cycles_alert() -> None:
    monitor = LiveLoopMonitor(repeat_threshold=5)
    results = [
        monitor.observe(call_start("t", name, n=1)) for name in ["open", "read", "open", "read"]
    ]
    assert results[:3] == [None, None, None]
    assert results[3] is not None and results[3].pattern == "cycle"
    assert "open → read" in results[3].message
    three = LiveLoopMonitor(repeat_threshold=5)
    names = ["a", "b", "c", "a", "b", "c"]
    assert [three.observe(call_start("t", n)) is not None for n in names] == [False] * 5 + [True]


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
    results: list[TraceResults] = []
    alerts: list[LoopAlert] = []
    stuck = "I am still looking up your order, please wait a moment."
    with OnlineEvaluator(
        capture=tmp_path / "c.jsonl",
        results_path=tmp_path / "r.jsonl",
        on_result=results.append,
        on_alert=alerts.append,
    ) as evaluator:
        for output in ["Your order shipped yesterday.", stuck, stuck]:
            evaluator.submit(trace(output))
        assert evaluator.flush(10)
    assert [r.trace_id for r in results] == [t.id for t in read_capture(tmp_path / "c.jsonl")]
    loops = [next(x for x in r.results if x.name == "loop_detection").score for r in results]
    assert loops[0] == 1.0 and loops[2] == pytest.approx(0.0, abs=1e-6)
    assert [a.pattern for a in alerts] == ["loop_detection"]
    reliability = next(r for r in results[-1].session_results if r.name == "agent_reliability")
    assert reliability.metadata["traces_evaluated"] == 3
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 3


class GatedMetric(Metric):
    """Blocks until the test opens the gate, like a judge that has stalled."""

    name = "gated"
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC
    gate = threading.Event()

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        self.gate.wait(10)
        return Score(1.0)


def test_full_queue_drops_from_scoring_never_from_capture(tmp_path: Path) -> None:
    # One trace in scoring (stalled), two queued, so 17 of 20 are dropped from scoring;
    # every one of the 20 is in the capture.
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
    evaluator.submit(submitted[0])
    deadline = time.monotonic() + 5
    while evaluator._queue is not None and evaluator._queue.qsize() and time.monotonic() < deadline:
        time.sleep(0.01)  # the first trace has left the queue and is being scored
    time.sleep(0.05)
    for item in submitted[1:]:
        evaluator.submit(item)
    gated.gate.set()
    assert evaluator.flush(10)
    stats = evaluator.stats
    evaluator.close()
    assert [t.id for t in read_capture(tmp_path / "c.jsonl")] == [t.id for t in submitted]
    assert stats.captured == 20 and stats.scored == 3 and stats.dropped_from_scoring == 17
    assert stats.unscored_trace_ids == [t.id for t in submitted[3:]]


def test_failing_metrics_and_callbacks_are_counted_not_raised(tmp_path: Path) -> None:
    def bad_callback(results: TraceResults) -> None:
        raise ValueError("sink bug")

    seen: list[TraceResults] = []
    with OnlineEvaluator(
        capture=tmp_path / "c.jsonl", metrics=[BrokenMetric(), "coherence"], on_result=bad_callback
    ) as evaluator:
        evaluator.add_result_callback(seen.append)
        evaluator.submit(trace("fine"))
        evaluator.flush(10)
    assert evaluator.stats.metric_errors == 1 and evaluator.stats.callback_errors == 1
    broken = next(r for r in seen[0].results if r.name == "broken")
    assert broken.score is None and broken.error == "RuntimeError: metric bug"
    assert next(r for r in seen[0].results if r.name == "coherence").score is not None


def test_live_tool_alert_is_delivered_within_milliseconds(tmp_path: Path) -> None:
    got = threading.Event()
    evaluator = OnlineEvaluator(capture=tmp_path / "c.jsonl", on_alert=lambda alert: got.set())
    for _ in range(3):
        evaluator.observe_tool_start(call_start("run", "search", q="same"))
    assert got.is_set()  # delivered synchronously on the observing thread
    evaluator.close()


def test_exit_without_close_loses_no_captured_trace(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        from agenteval_core import Trace
        from agenteval_core._online import OnlineEvaluator
        evaluator = OnlineEvaluator(capture={str(tmp_path / "c.jsonl")!r},
                                    results_path={str(tmp_path / "r.jsonl")!r})
        for i in range(50):
            evaluator.submit(Trace(input="q", output=f"answer {{i}}", session_id="s"))
        # no flush, no close: the exit hook must finish the work
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert len(list(read_capture(tmp_path / "c.jsonl"))) == 50
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 50
