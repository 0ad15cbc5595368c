"""Hardening: judge faults end in explicit results, a killed agent loses at most the trace in
flight, and odd callback sequences never reach the agent."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar
from uuid import uuid4

import pytest
from agenteval_crewai._translate import Translator
from agenteval_langchain import AgentEvalCallbackHandler, AgentLoopError
from agenteval_langchain._handler import HOOKS
from agenteval_langchain._scripted import ScriptedChatModel, tool_call
from agenteval_llamaindex import LlamaIndexInstrumentation
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from judge_server import JudgeServer, Reply
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool

from agenteval_core import (
    CaptureFormatError,
    CaptureWriter,
    EvalCase,
    Metric,
    MetricKind,
    OnlineEvaluator,
    Score,
    Trace,
    TraceResults,
    create_metric,
    read_capture,
    replay,
)
from agenteval_core.judges import OpenAIJudge

# --- judge faults --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "error"),
    [("down", "judge unavailable: gave up"), ("slow", "timed out"), ("garbage", "unparsable:")],
)
def test_judge_faults_end_in_explicit_results_and_replay_rescores(
    fault: str, error: str, judge_server: JudgeServer, tmp_path: Path
) -> None:
    if fault == "down":
        base_url = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    else:
        base_url = judge_server.base_url
        judge_server.responder = (
            (lambda r: Reply(json.dumps({"score": 1, "reason": "late"}), delay=1.0))
            if fault == "slow"
            else (lambda r: Reply("<<garbage>>"))
        )
    judge = OpenAIJudge(
        "m", base_url=base_url, cache=None, max_retries=1, timeout=0.3, backoff_base=0.01
    )
    seen: list[TraceResults] = []
    with OnlineEvaluator(
        capture=tmp_path / "c.jsonl",
        metrics=[create_metric("confidence", judge=judge)],
        on_result=lambda trace, outcome: seen.append(outcome),
    ) as evaluator:
        for i in range(3):
            evaluator.submit(Trace(input=f"q{i}", output=f"a{i}", session_id="s"))
        assert evaluator.flush(30)
    results = [r for outcome in seen for r in outcome.results]
    assert len(results) == 3
    assert all(r.score is None and r.error is not None and error in r.error for r in results)
    # later, with the judge back, a replay of the capture scores every trace
    judge_server.responder = lambda r: Reply(json.dumps({"score": 0.75, "reason": "ok"}))
    healthy = OpenAIJudge("m", base_url=judge_server.base_url, cache=None)
    report = replay(tmp_path / "c.jsonl", ["confidence"], judge=healthy)
    confidence = report.summary.metrics["confidence"]
    assert confidence.scored == 3 and confidence.mean == 0.75


# --- crash safety ------------------------------------------------------------------------------

AGENT = textwrap.dedent(
    """
    import sys, time
    from agenteval_core import Trace
    from agenteval_core import OnlineEvaluator
    evaluator = OnlineEvaluator(capture=sys.argv[1])
    for i in range(100000):
        evaluator.submit(Trace(input=f"question {i}", output="x" * 2000, session_id="s"))
        time.sleep(0.002)
    """
)


def test_sigkill_loses_at_most_the_trace_in_flight_and_restart_appends(tmp_path: Path) -> None:
    capture = tmp_path / "c.jsonl"
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(capture)])
    deadline = time.monotonic() + 60
    while (
        not capture.exists() or capture.stat().st_size < 200_000
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(10)
    errors: list[Any] = []
    survived = list(read_capture(capture, on_error=errors.append))
    assert len(survived) > 50
    assert len(errors) <= 1 and all(e.truncated for e in errors)  # at most the line being written
    assert [t.input for t in survived] == [f"question {i}" for i in range(len(survived))]
    # a restart appends to the same capture, and every complete line still reads
    with OnlineEvaluator(capture=capture) as evaluator:
        evaluator.submit(Trace(input="after restart", output="ok", session_id="s"))
    again = list(read_capture(capture, on_error=lambda e: None))
    assert len(again) == len(survived) + 1 and again[-1].input == "after restart"


# --- callback fuzzing (LangChain) ---------------------------------------------------------------


class Cyclic:
    def __init__(self) -> None:
        self.me = self


payloads = st.one_of(
    st.none(),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.just(Cyclic()),
    st.just("y" * 200_000),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.just(ValueError("boom")),
)
events = st.lists(
    st.tuples(
        st.sampled_from(HOOKS),
        st.integers(0, 5),
        st.one_of(st.none(), st.integers(0, 5)),
        payloads,
        st.booleans(),  # a graph's step (its parent runs a graph: an agent when named)
    ),
    max_size=30,
)


@settings(
    max_examples=int(os.environ.get("AGENTEVAL_FUZZ_EXAMPLES", "150")),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sequence=events, stop_on_loop=st.booleans())
def test_langchain_handler_survives_any_event_sequence(
    sequence: list[tuple[str, int, int | None, Any, bool]], stop_on_loop: bool, tmp_path: Path
) -> None:
    # runs that claim each other as parents included: the guard's walk up a run's agents ends
    evaluator = OnlineEvaluator(capture=None, metrics=[], session_metrics=[])
    handler = AgentEvalCallbackHandler(evaluator, stop_on_loop=stop_on_loop)
    ids = [uuid4() for _ in range(6)]
    for hook, run, parent, payload, step in sequence:
        kwargs: dict[str, Any] = {
            "run_id": ids[run],
            "parent_run_id": ids[parent] if parent is not None else None,
            "tags": ["graph:step:1"] if step else [],
        }
        args: tuple[Any, ...] = (
            (payload,)
            if hook.endswith(("_end", "_error", "_action", "_finish"))
            else ({"name": "x"}, payload)
        )
        try:  # must never raise into the agent, but to stop a loop
            getattr(handler, hook)(*args, **kwargs)
        except AgentLoopError:
            assert stop_on_loop and hook == "on_tool_start"
    assert evaluator.recorder.flush(10)
    assert handler._translator.assembler.open_traces() <= 6  # bounded by the runs started
    evaluator.close()


# --- load -----------------------------------------------------------------------------------------


def test_100_concurrent_sessions_and_a_slow_judge(tmp_path: Path) -> None:
    class SlowJudge(Metric):
        """A judge-like metric that takes 50 ms per trace."""

        name = "slow_judge"
        kind: ClassVar[MetricKind] = MetricKind.JUDGE

        async def acompute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
            await asyncio.sleep(0.05)
            return Score(1.0)

    @tool
    def lookup(user: str) -> str:
        """Look a user up."""
        return f"record of {user}"

    def reply(messages: Sequence[BaseMessage]) -> AIMessage:
        user = str(messages[0].content).split()[-1]
        if not any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage(content="", tool_calls=[tool_call("lookup", f"id-{user}", user=user)])
        return AIMessage(content=f"done for {user}")

    agent = create_agent(ScriptedChatModel(reply=reply), tools=[lookup])
    evaluator = OnlineEvaluator(
        capture=tmp_path / "c.jsonl", metrics=[SlowJudge()], session_metrics=[], queue_size=10
    )

    def run(user: str) -> None:
        handler = AgentEvalCallbackHandler(evaluator, session_id=f"session-{user}")
        agent.invoke({"messages": [("user", f"help {user}")]}, config={"callbacks": [handler]})

    async def run_async(users: list[str]) -> None:
        async def one(user: str) -> None:
            handler = AgentEvalCallbackHandler(evaluator, session_id=f"session-{user}")
            await agent.ainvoke(
                {"messages": [("user", f"help {user}")]}, config={"callbacks": [handler]}
            )

        await asyncio.gather(*(one(u) for u in users))

    threads = [threading.Thread(target=run, args=(f"t{i}",)) for i in range(50)]
    for thread in threads:
        thread.start()
    asyncio.run(run_async([f"a{i}" for i in range(50)]))
    for thread in threads:
        thread.join()
    assert evaluator.flush(60)
    stats = evaluator.stats
    evaluator.close()
    traces = list(read_capture(tmp_path / "c.jsonl"))
    assert len(traces) == 100 and len({t.session_id for t in traces}) == 100
    for trace in traces:
        user = trace.session_id.removeprefix("session-")  # type: ignore[union-attr]
        assert trace.input == f"help {user}" and trace.output == f"done for {user}"
        assert [c.arguments for c in trace.tool_calls()] == [{"user": user}]
    # the queue policy held: everything captured, the slow scorer kept up with what fit in its queue
    assert stats.captured == 100 and stats.scored + stats.dropped_from_scoring == 100
    assert (
        stats.dropped_from_scoring > 0
        and len(stats.unscored_trace_ids) == stats.dropped_from_scoring
    )
    print(
        f"load: 100 sessions, {stats.scored} scored, {stats.dropped_from_scoring} dropped from scoring"
    )


# --- callback fuzzing (LlamaIndex, CrewAI) ---------------------------------------------------------

FUZZ = settings(
    max_examples=int(os.environ.get("AGENTEVAL_FUZZ_EXAMPLES", "150")),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SPAN_NAMES = [
    "FunctionAgent.run",
    "BaseWorkflowAgent.call_tool",
    "BaseWorkflowAgent.run_agent_step",
    "Other.step",
]


class Bound:
    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments


@FUZZ
@given(
    sequence=st.lists(
        st.tuples(
            st.sampled_from(["new", "exit", "drop"]),
            st.integers(0, 5),
            st.one_of(st.none(), st.integers(0, 5)),
            payloads,
        ),
        max_size=30,
    )
)
def test_llamaindex_handlers_survive_any_span_sequence(
    sequence: list[tuple[str, int, int | None, Any]],
) -> None:
    evaluator = OnlineEvaluator(capture=None, metrics=[], session_metrics=[])
    instrumentation = LlamaIndexInstrumentation(evaluator)  # not installed: driven directly
    handler = instrumentation._span_handler
    ids = [f"{SPAN_NAMES[i % len(SPAN_NAMES)]}-{uuid4()}" for i in range(6)]
    for action, span, parent, payload in sequence:
        if action == "new":
            handler.new_span(
                ids[span],
                Bound({"ev": payload, "user_msg": payload}),
                payload,
                ids[parent] if parent is not None else None,
                {"session_id": payload},
            )
        elif action == "exit":
            handler.prepare_to_exit_span(ids[span], None, result=payload)
        else:
            handler.prepare_to_drop_span(
                ids[span], None, err=payload if isinstance(payload, BaseException) else None
            )
        instrumentation._event_handler.handle(payload)  # not an LLM event: ignored, never raises
    assert instrumentation.recorder.flush(10)
    assert instrumentation.translator.assembler.open_traces() <= 6
    evaluator.close()


def crew_event(name: str, **fields: Any) -> Any:
    """An object of the CrewAI event class name the translator dispatches on."""
    return type(name, (), {"timestamp": None, "task_id": None, "agent_id": None, **fields})()


CREW_EVENTS = [
    "CrewKickoffStartedEvent",
    "CrewKickoffCompletedEvent",
    "CrewKickoffFailedEvent",
    "TaskStartedEvent",
    "TaskCompletedEvent",
    "AgentExecutionStartedEvent",
    "LLMCallStartedEvent",
    "LLMCallCompletedEvent",
    "ToolUsageStartedEvent",
    "ToolUsageFinishedEvent",
    "ToolUsageErrorEvent",
    "SomethingElseEvent",
]


@FUZZ
@given(
    sequence=st.lists(
        st.tuples(
            st.sampled_from(CREW_EVENTS),
            st.integers(0, 5),
            st.one_of(st.none(), st.integers(0, 5)),
            payloads,
        ),
        max_size=30,
    )
)
def test_crewai_translator_survives_any_event_sequence(
    sequence: list[tuple[str, int, int | None, Any]],
) -> None:
    evaluator = OnlineEvaluator(capture=None, metrics=[], session_metrics=[])
    translator = Translator(evaluator.recorder, session_id="fuzz", watch_loops=True)
    ids = [str(uuid4()) for _ in range(6)]
    put = evaluator.recorder.put
    for name, key, parent, payload in sequence:
        put(
            (
                translator.handle,
                crew_event(
                    name,
                    event_id=ids[key],
                    started_event_id=ids[key],
                    parent_event_id=ids[parent] if parent is not None else None,
                    crew_name=payload,
                    inputs=payload,
                    task_name=payload,
                    agent_role=payload,
                    tool_name="tool",
                    tool_args=payload,
                    output=payload,
                    error=payload,
                    response=payload,
                    model=payload,
                    messages=payload,
                    call_id=payload,
                    usage=None,
                ),
                time.time(),
                payload,  # the event's source: any object, as odd as the payloads
                None,  # no agenteval_core.session(...) around it
            )
        )
    assert evaluator.recorder.flush(10)
    assert translator.assembler.open_traces() <= 6
    evaluator.close()


# --- hostile files -------------------------------------------------------------------------------

BIG_LINE_READER = textwrap.dedent(
    """
    import sys
    from agenteval_core import read_capture

    def peak_kib():
        # this process's own peak; ru_maxrss would carry pytest's larger one across exec
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))

    errors = []
    before = peak_kib()
    traces = list(read_capture(sys.argv[1], on_error=errors.append, max_line_bytes=LIMIT))
    print(len(traces), (peak_kib() - before) / 1024, errors[0])
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's VmHWM")
def test_an_oversized_line_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    capture = tmp_path / "c.jsonl"
    good = Trace(input="q", output="a").model_dump_json()
    with open(capture, "w") as handle:  # a 100 MB line between two good ones
        handle.write(good + "\n")
        handle.write('{"id": "' + "x" * 100_000_000 + '"}\n')
        handle.write(good + "\n")
    done = subprocess.run(
        [sys.executable, "-c", BIG_LINE_READER.replace("LIMIT", str(8 * 2**20)), str(capture)],
        capture_output=True,
        text=True,
        check=True,
    )
    count, grown, message = done.stdout.split(" ", 2)
    assert int(count) == 2  # the lines around it are read
    assert float(grown) <= 3 * 8  # MiB: at most 3× the 8 MiB limit
    # '{"id": "' (8 bytes) + 100,000,000 + '"}' + newline (3 bytes)
    assert message.strip() == (
        f"{capture}:2: line of 100,000,011 bytes is over the 8,388,608-byte limit; skipped"
    )


def test_error_messages_quote_an_excerpt_of_a_huge_key(tmp_path: Path) -> None:
    capture = tmp_path / "c.jsonl"
    key = "k" * 1_000_000
    capture.write_text(json.dumps({"id": "t", key: 1}) + "\n")
    errors: list[CaptureFormatError] = []
    assert list(read_capture(capture, on_error=errors.append)) == []
    [error] = errors
    assert len(str(error)) < 400
    assert str(error).startswith(f"{capture}:1 field '{'k' * 120}… (1,000,000 characters)'")


def test_a_killed_writers_fragment_is_closed_off_and_a_glued_line_is_recovered(
    tmp_path: Path,
) -> None:
    # Two workers share a capture. Worker A dies mid-line; worker B, whose file was already
    # open, ends A's fragment with a newline before its own next line.
    capture = tmp_path / "c.jsonl"
    healthy = CaptureWriter(capture)  # worker B
    healthy.write(Trace(id="b1", input="q", output="a"))
    torn = Trace(id="a1", input="q", output="x" * 500).model_dump_json()
    with open(capture, "ab") as worker_a:
        worker_a.write(torn[:200].encode())  # killed here: no rest of line, no newline
    healthy.write(Trace(id="b2", input="q", output="a"))
    healthy.write(Trace(id="b3", input="q", output="a"))
    healthy.close()
    errors: list[CaptureFormatError] = []
    traces = list(read_capture(capture, on_error=errors.append))
    assert [t.id for t in traces] == ["b1", "b2", "b3"]  # no healthy trace lost
    [fragment] = errors
    assert (fragment.line, fragment.truncated) == (2, True)
    assert str(fragment).endswith("truncated line (its writer stopped mid-line)")
    assert capture.read_text().splitlines()[1] == torn[:200]  # on a line of its own

    # a file written by a writer that appended straight after a fragment (an older
    # agenteval, another tool): the whole trace glued to the fragment is still recovered
    glued = tmp_path / "glued.jsonl"
    b2 = Trace(id="b2", input="q", output="a").model_dump_json()
    glued.write_text(f"{torn[:200]}{b2}\n")
    errors.clear()
    assert [t.id for t in read_capture(glued, on_error=errors.append)] == ["b2"]
    [fragment] = errors
    assert (fragment.line, fragment.truncated) == (1, True)
    assert "the trace written after it on the same line was recovered" in str(fragment)


def test_every_error_survives_the_trip_back_from_a_worker() -> None:
    # a replay's worker processes and Ray actors send their errors back pickled: one that
    # cannot be rebuilt reached the caller as Ray's UnserializableException, its words lost
    import inspect
    import pickle

    from agenteval_core import _errors

    usage = _errors.JudgeUsage(calls=2, input_tokens=30, output_tokens=4)
    raised = [
        _errors.AgentEvalError("x"),
        _errors.MetricInputError("threshold must be in [0, 1]"),
        _errors.UnknownMetricError("tool_failurez", ["tool_failures", "coherence"]),
        _errors.CaptureError("no capture file matches 'x/*.jsonl'"),
        _errors.ClusterUnreachableError("no Ray cluster at ray://head:10001"),
        _errors.ResultsWriteError("r.jsonl", 3, OSError(28, "No space left on device")),
        _errors.CaptureFormatError("c.jsonl", 2, "spans.0.kind", "bad kind", truncated=True),
        _errors.SchemaVersionError("c.jsonl", 1, None, "schema version 9 is newer"),
        _errors.JudgeError("gpt-4o-mini: boom"),
        _errors.JudgeConfigError("gpt-4o-mini: no API key"),
        _errors.JudgeUnavailableError("gpt-4o-mini: 503"),
        _errors.JudgeBudgetError("budget exhausted"),
        _errors.JudgeContextOverflowError("gpt-4o-mini: context overflow"),
        _errors.JudgeUnsupportedRequestError("gpt-4o-mini: 401"),
        _errors.JudgeParseError("not JSON after 2 re-asks", raw_reply="sure!"),
        _errors.JudgeInvalidAnswerError("3 verdicts for 2 items", raw_reply='{"v": [1,1,1]}'),
    ]
    every = {
        cls
        for cls in vars(_errors).values()
        if inspect.isclass(cls)
        and issubclass(cls, BaseException)
        and cls.__module__ == _errors.__name__
    }
    assert {type(error) for error in raised} == every  # a new error is added here
    for error in raised:
        if isinstance(error, _errors.JudgeError):
            error.usage.add(usage)
        back = pickle.loads(pickle.dumps(error))
        assert (type(back), str(back)) == (type(error), str(error))
        fields = {k: v for k, v in vars(error).items() if k not in ("report", "cause")}
        assert {k: v for k, v in vars(back).items() if k in fields} == fields
    written = pickle.loads(pickle.dumps(raised[5]))
    assert (written.cause.errno, written.report) == (28, None)  # its report stays behind
