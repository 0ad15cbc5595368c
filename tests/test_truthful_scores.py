"""Scores that tell the truth about failed, stopped and looping runs."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from judge_server import JudgeServer
from test_judge_metrics import judge

from agenteval_core import (
    STEPS_UNRECORDED,
    AgentStep,
    Engine,
    EvalCase,
    RunStatus,
    Span,
    SpanKind,
    ToolCall,
    Trace,
    agent_consistency,
    agent_reliability,
    create_metric,
    default_metric_names,
)
from agenteval_core.pytest_plugin import assert_eval

GOOD = {"confidence": 0.88, "loop_detection": 0.95, "tool_correctness": 0.92, "coherence": 0.97}


def run(
    calls: list[tuple[str, dict[str, Any]]],
    *,
    output: Any = "Order A-1 has shipped.",
    status: RunStatus = RunStatus.OK,
    session: str | None = "s",
    **fields: Any,
) -> Trace:
    spans = [Span(kind=SpanKind.AGENT, name="agent", start_time=0.0, end_time=10.0)]
    for index, (name, arguments) in enumerate(calls):
        call = ToolCall(id=f"c{index}", name=name, arguments=arguments, result="processing")
        spans.append(
            Span(
                kind=SpanKind.TOOL,
                name=name,
                start_time=index + 1.0,
                end_time=index + 1.5,
                tool_call=call,
            )
        )
    return Trace(
        input="Where is order A-1?",
        output=output,
        session_id=session,
        spans=spans,
        status=status,
        **fields,
    )


SAME = ("lookup_order", {"order_id": "A-1"})


# --- the within-run loop metric --------------------------------------------------------------


def test_four_identical_calls_fail_the_within_run_loop_metric() -> None:
    result = create_metric("tool_call_loops").measure(run([SAME] * 4))
    assert (result.score, result.success) == (0.0, False)
    assert (
        result.reason == 'lookup_order called 3 times with the same arguments {"order_id": "A-1"}'
    )
    [loop] = result.metadata["loops"]
    assert (loop["pattern"], loop["count"]) == ("repeated_call", 3)
    assert loop["calls"] == [{"name": "lookup_order", "arguments": {"order_id": "A-1"}}] * 3
    assert result.metadata["tool_calls"] == 4
    with pytest.raises(AssertionError, match=r"tool_call_loops: score 0\.000 < threshold 0\.5"):
        assert_eval(run([SAME] * 4), ["tool_call_loops"])


def test_cycles_loop_and_a_second_look_does_not() -> None:
    cycle = [("open", {"f": 1}), ("read", {"f": 1})] * 2
    result = create_metric("tool_call_loops").measure(run(cycle))
    assert result.score == 0.0 and result.reason == "cycle open → read repeated 2 times"
    twice = create_metric("tool_call_loops").measure(run([SAME, ("refund", {}), SAME]))
    assert (twice.score, twice.reason) == (1.0, "no repeated calls or cycles among 3 tool calls")
    assert "tool_call_loops" in default_metric_names()


def test_a_call_that_finds_something_new_each_time_is_no_loop() -> None:
    # a coding agent reads its file again after each edit: the same read three times, each
    # finding the edit it made. Counted alone, the calls were a loop (and stop_on_loop=True
    # stopped the agent at its third read)
    def read(content: str) -> ToolCall:
        return ToolCall(name="read_file", arguments={"path": "notes.md"}, result=content)

    def edit(old: str, new: str) -> ToolCall:
        return ToolCall(
            name="edit_file", arguments={"path": "notes.md", "old": old, "new": new}, result="ok"
        )

    def measured(*calls: ToolCall) -> Any:
        steps = [AgentStep(tool_calls=[call]) for call in calls] + [AgentStep(output="Fixed.")]
        return create_metric("tool_call_loops").measure(Trace.from_steps("Fix notes.md", steps))

    edits = [read("teh cat"), edit("teh", "the"), read("the cat"), edit("cat", "dog")]
    assert measured(*edits, read("the dog")).score == 1.0
    # what the same read finds again and again is still a loop: three times unchanged
    stuck = measured(read("teh cat"), read("teh cat"), read("teh cat"))
    assert (stuck.score, stuck.reason) == (
        0.0,
        'read_file called 3 times with the same arguments {"path": "notes.md"}',
    )
    # counted from the last change: the three reads that found "the cat" loop, with the
    # one before them left out of the loop's calls
    after = measured(read("teh cat"), read("the cat"), read("the cat"), read("the cat"))
    [loop] = after.metadata["loops"]
    assert (after.score, loop["count"], len(loop["calls"])) == (0.0, 3, 3)


def test_calls_between_which_the_run_found_something_new_are_no_loop() -> None:
    # a deploy watch: the same wait three times, the job's status new after each (a note
    # of each check between: no cycle). The waits are the agent giving its work time; they
    # were a loop as long as each call's count read only its own results
    def status(now: str) -> ToolCall:
        return ToolCall(name="job_status", arguments={"job": "deploy-7"}, result=now)

    def wait() -> ToolCall:
        return ToolCall(name="wait", arguments={"seconds": 10}, result="waited 10 s")

    def note(text: str) -> ToolCall:
        return ToolCall(name="note", arguments={"text": text}, result="noted")

    def measured(*calls: ToolCall) -> Any:
        steps = [AgentStep(tool_calls=[call]) for call in calls] + [AgentStep(output="Live.")]
        return create_metric("tool_call_loops").measure(Trace.from_steps("Watch it", steps))

    def watch(*statuses: str) -> list[ToolCall]:
        calls = []
        for index, now in enumerate(statuses):
            calls += [wait(), status(now), note(f"check {index + 1}")]
        return calls

    assert measured(*watch("queued", "building", "live")).score == 1.0
    # nothing new between the waits: the third is a loop
    stuck = measured(*watch("building", "building", "building"))
    assert (stuck.score, stuck.reason) == (
        0.0,
        'wait called 3 times with the same arguments {"seconds": 10}; '
        'job_status called 3 times with the same arguments {"job": "deploy-7"}',
    )
    # counted from the last news ("building", then the same twice): the status asked for
    # a third time since is the loop, and the waits since the news only two
    late = measured(*watch("queued", "building", "building"), wait(), status("building"))
    [loop] = late.metadata["loops"]
    assert (late.score, loop["count"]) == (0.0, 3)
    assert loop["calls"] == [{"name": "job_status", "arguments": {"job": "deploy-7"}}] * 3
    # a cycle whose status moved on each round went on; one whose status stood still loops
    cycle = [status("queued"), wait(), status("building"), wait(), status("live")]
    assert measured(*cycle).score == 1.0
    still = measured(status("queued"), wait(), status("queued"), wait())
    assert (still.score, still.reason) == (0.0, "cycle job_status → wait repeated 2 times")
    # as the live guard reads it, the call that closes a cycle is about to run: a wait,
    # a check, a wait and a check closes it before the second check returns anything
    blind = measured(wait(), status("queued"), wait(), status("building"))
    assert (blind.score, blind.reason) == (0.0, "cycle wait → job_status repeated 2 times")


def test_a_timestamp_or_request_id_in_an_answer_is_nothing_new() -> None:
    # a raw API's answer carries the time it was asked and an id of the request: the order
    # stayed "processing" while those changed, and each lookup read as news (a loop through
    # such a tool was never seen, and stop_on_loop never stopped it)
    def lookup(result: Any) -> ToolCall:
        return ToolCall(name="lookup_order", arguments={"order_id": "A-1"}, result=result)

    def measured(*results: Any) -> Any:
        steps = [AgentStep(tool_calls=[lookup(result)]) for result in results]
        steps.append(AgentStep(output="Still processing."))
        return create_metric("tool_call_loops").measure(Trace.from_steps("Where is A-1?", steps))

    repeat = 'lookup_order called 3 times with the same arguments {"order_id": "A-1"}'
    stamped = [
        {
            "status": "processing",
            "checked_at": f"2026-12-{day:02}T0{second}:59:5{second}.{second}12Z",
            "request_id": request,
            "server_time": 1764755400 + second,
            "etag": f"W/{etag}",
        }
        for day, second, request, etag in [
            (3, 1, "6f1c3a52-9b4e-4d1a-8f0e-2c7d5b9a1e34", "a3f5c9e1b7d2f4a8c6e0"),
            (3, 2, "0b8e7d6c-5a4f-4e3d-9c2b-1a0f9e8d7c6b", "9e8d7c6b5a4f3e2d1c0b"),
            (4, 3, "req_01HZX3K9F2Q8W7V6T5R4", "b7d2f4a8c6e0a3f5c9e1"),
        ]
    ]
    assert (measured(*stamped).score, measured(*stamped).reason) == (0.0, repeat)
    # in an HTTP date or a text, as an error's request id, and in Unix milliseconds alike
    for said in (
        "Thu, 03 Dec 2026 09:30:0{n} GMT: processing",
        "processing (request 8f3a9c2b1d7e6f5a4b3{n})",
        "processing since 176475540012{n}",
        "{{'status': 'processing', 'conn': <Connection object at 0x7f3a2b1c4d5{n}>}}",
    ):
        assert measured(*[said.format(n=n) for n in (1, 2, 3)]).score == 0.0, said
    # what changed with them is news: a status, a count, a date with no time, a new text
    moved = [dict(stamped[0]), dict(stamped[1], status="packed"), dict(stamped[2])]
    assert measured(*moved).score == 1.0
    for news in (
        ["3 of 10 parcels scanned", "5 of 10 parcels scanned", "8 of 10 parcels scanned"],
        ["arrives 2026-12-05", "arrives 2026-12-06", "arrives 2026-12-07"],
        ["ETA 14:00", "ETA 14:30", "ETA 15:00"],
    ):
        assert measured(*news).score == 1.0, news
    # an answer that is nothing but the time or a new id is what the tool was asked for
    times = ["2026-12-03T09:30:01Z", "2026-12-03T09:30:02Z", "2026-12-03T09:30:03Z"]
    assert measured(*times).score == 1.0
    ids = ["6f1c3a52-9b4e-4d1a-8f0e-2c7d5b9a1e34", "0b8e7d6c-5a4f-4e3d-9c2b-1a0f9e8d7c6b"]
    assert measured(*ids, "req_01HZX3K9F2Q8W7V6T5R4").score == 1.0

    # in a large answer too, read where the answers differ: a page of 2,000 orders whose
    # timestamp changed is the same page; one whose 1,000th order moved on is news
    def page(stamp: str, moved: int | None = None, traced: int = 0) -> dict[str, Any]:
        orders = [
            {"id": f"A-{n}", "status": "shipped" if n == moved else "processing"}
            for n in range(2000)
        ]
        for order in orders[:traced]:  # each with a trace id of its own, new on each call
            order["trace"] = str(uuid.uuid4())
        return {"orders": orders, "fetched_at": stamp}

    clock = [f"2026-12-03 09:30:0{n}" for n in (1, 2, 3)]
    assert measured(*[page(at) for at in clock]).score == 0.0
    assert measured(page(clock[0]), page(clock[1], moved=1000), page(clock[2])).score == 1.0
    # answers are read for such values over 64 KiB where they differ at most: 500 new
    # trace ids (~27 KB apart) are nothing new; 2,000 (~108 KB) are news, read as written
    assert measured(*[page(at, traced=500) for at in clock]).score == 0.0
    assert measured(*[page(at, traced=2000) for at in clock]).score == 1.0
    # a failure told with a new request id each time is the same failure
    failed = [
        ToolCall(
            name="lookup_order",
            arguments={"order_id": "A-1"},
            error=f"HTTP 503 (request {request}): try again later",
        )
        for request in ("a3f5c9e1b7d2f4a8c6e0", "9e8d7c6b5a4f3e2d1c0b", "b7d2f4a8c6e0a3f5c9e1")
    ]
    steps = [AgentStep(tool_calls=[call]) for call in failed] + [AgentStep(output="Down.")]
    looped = create_metric("tool_call_loops").measure(Trace.from_steps("Where is A-1?", steps))
    assert (looped.score, looped.reason) == (0.0, repeat)


def agents_run(
    agents: dict[str, tuple[float, float]], calls: list[tuple[str, str, dict[str, Any]]]
) -> Trace:
    """A run whose agent spans (id → start, end) made ``calls`` (agent span, tool,
    arguments; one a second, from t = 1), under a root agent span."""
    spans = [Span(id="root", kind=SpanKind.AGENT, name="crew", start_time=0.0, end_time=99.0)]
    for name, (start, end) in agents.items():
        spans.append(
            Span(
                id=name,
                parent_id="root",
                kind=SpanKind.AGENT,
                name=name,
                start_time=start,
                end_time=end,
            )
        )
    for index, (agent, tool, arguments) in enumerate(calls):
        call = ToolCall(id=f"c{index}", name=tool, arguments=arguments, result="running")
        at = index + 1.0
        spans.append(
            Span(
                parent_id=agent,
                kind=SpanKind.TOOL,
                name=tool,
                start_time=at,
                end_time=at + 0.5,
                tool_call=call,
            )
        )
    return Trace(input="Watch A and B", output="A and B are done.", spans=spans)


def test_agents_running_at_once_loop_each_in_their_own_lane() -> None:
    # two pollers sent at once, each checking its own job twice: read as one sequence their
    # calls closed "cycle job_status → job_status" that neither made (and the live guard
    # stopped the run with stop_on_loop=True)
    loops = create_metric("tool_call_loops")
    a, b = ("A", "job_status", {"job": "A"}), ("B", "job_status", {"job": "B"})
    at_once = {"A": (0.5, 10.0), "B": (0.5, 10.0)}
    result = loops.measure(agents_run(at_once, [a, b, a, b]))
    assert (result.score, result.reason) == (1.0, "no repeated calls or cycles among 4 tool calls")
    # three workers at once, each reading the same rules once: nobody repeated a call
    rules = [(worker, "get_rules", {}) for worker in "ABC"]
    three = {worker: (0.5, 10.0) for worker in "ABC"}
    assert loops.measure(agents_run(three, rules)).score == 1.0
    # one of them polling its job three times is its loop, with its calls only
    result = loops.measure(agents_run(at_once, [a, b, a, b, a]))
    assert (result.score, result.reason) == (
        0.0,
        'job_status called 3 times with the same arguments {"job": "A"}',
    )
    assert (
        result.metadata["loops"][0]["calls"]
        == [{"name": "job_status", "arguments": {"job": "A"}}] * 3
    )
    # the same calls by agents one after another (each sent back to redo its check): one
    # sequence, and the cycle is the run's
    one_by_one = {"A1": (0.5, 1.9), "B1": (1.9, 2.9), "A2": (2.9, 3.9), "B2": (3.9, 4.9)}
    again = [(span, "job_status", {"job": span[0]}) for span in one_by_one]
    result = loops.measure(agents_run(one_by_one, again))
    assert (result.score, result.reason) == (0.0, "cycle job_status → job_status repeated 2 times")


def test_a_case_without_a_trace_is_an_error_not_a_score() -> None:
    result = create_metric("tool_call_loops").measure(EvalCase(input="q"))
    assert result.score is None and "no trace" in (result.error or "")


# --- no vacuous perfect scores for runs that did not complete --------------------------------


@pytest.mark.parametrize("status", [RunStatus.STOPPED, RunStatus.ERROR, RunStatus.CANCELLED])
def test_a_run_that_did_not_complete_gets_no_assumed_score(status: RunStatus) -> None:
    trace = run([SAME] * 2, output=None, status=status, error="AgentLoopError: stopped")
    engine = Engine(["coherence", "loop_detection"])
    [outcome] = engine.score_sync([trace])
    for result in outcome.results:
        assert (result.score, result.skipped) == (None, True), result.name
        assert result.reason == f"not scored: the run ended with status {status}"
    # a completed run with an empty output keeps the seed's assumption
    [completed] = engine.score_sync([run([], output=None, session="other")])
    assert [r.score for r in completed.results] == [1.0, 1.0]


# --- the session metrics see failures and loops ----------------------------------------------


def test_a_failed_run_raises_session_risk() -> None:
    # GOOD's step risk is .12; the failed run's is max(.12, 1.0) = 1.0. 8 traces: k = ceil(1.2)
    # = 2; top two 1.0 and .12 → mean .56; raw = .9 × .56 + .1 × 1.0 = .604 → score .396
    signals = [GOOD] * 7 + [{**GOOD, "run_completed": 0.0}]
    result = agent_reliability(signals, [f"t{i}" for i in range(8)])
    assert result.score == pytest.approx(0.396) and result.success is False
    assert result.metadata["flagged_traces"] == ["t7"]
    assert result.metadata["per_trace_signals"]["t7"]["run_risk"] == 1.0
    assert "run_risk" not in result.metadata["per_trace_signals"]["t0"]
    # consistency: penalty .05 + .8 × .08 + .03 + 1.0 = 1.144; (1 + 1.144) × .12 = .25728
    consistency = agent_consistency([{**GOOD, "run_completed": 0.0}])
    assert consistency.score == pytest.approx(1 - 0.25728)


def test_a_loop_inside_a_run_is_the_sessions_loop_risk() -> None:
    # loop risk = max(1 − loop_detection, 1 − tool_call_loops) = max(.05, 1.0) = 1.0
    result = agent_reliability([{**GOOD, "tool_call_loops": 0.0}], ["t1"])
    assert result.score == pytest.approx(0.0)
    assert result.metadata["per_trace_signals"]["t1"]["loop_risk"] == 1.0
    # and a run without loops changes nothing: the loop risk stays loop_detection's
    same = agent_reliability([{**GOOD, "tool_call_loops": 1.0}], ["t1"])
    assert same.score == pytest.approx(agent_reliability([GOOD], ["t1"]).score)


@pytest.mark.parametrize(
    "last",
    [
        run([SAME] * 4, output=None, status=RunStatus.STOPPED, error="AgentLoopError: loop"),
        run([], output=None, status=RunStatus.ERROR, error="RuntimeError: the model is down"),
    ],
    ids=["stopped", "errored"],
)
def test_a_stopped_or_errored_run_fails_its_session(last: Trace) -> None:
    healthy = [
        run([SAME], output="Order A-1 has shipped."),
        run([("track", {"order_id": "A-1"})], output="Where is order A-1? With DHL, in Paris."),
    ]
    engine = Engine()  # the default metrics
    outcomes = engine.score_sync([*healthy, last])
    reliability = next(r for r in outcomes[-1].session_results if r.name == "agent_reliability")
    assert reliability.score is not None and reliability.score < reliability.threshold
    assert reliability.success is False
    assert reliability.metadata["flagged_traces"] == [last.id]
    before = next(r for r in outcomes[1].session_results if r.name == "agent_reliability")
    assert before.success is True  # the healthy runs alone pass


@pytest.mark.parametrize(
    "name",
    [
        "tool_call_accuracy",
        "reference_tool_correctness",
        "tool_selection_f1",
        "plan_order",
        "tool_routing_accuracy",
    ],
)
def test_a_case_with_no_run_is_an_error_for_the_tool_metrics(name: str) -> None:
    result = create_metric(name).measure(EvalCase(input="q", expected_tool_calls=["search"]))
    assert (result.score, result.success, result.skipped) == (None, None, False)
    assert result.error == (
        "invalid input: the case has no trace (give trace=, agent_trace= or a Trace)"
    )
    # a run that called nothing is a real 0.0, not an error
    ran = create_metric(name).measure(
        EvalCase(input="q", expected_tool_calls=["search"], trace=Trace())
    )
    assert ran.score == 0.0 and ran.error is None


# --- a trace whose steps were not recorded ---------------------------------------------------

STEP_METRICS = [
    "tool_failures",
    "tool_call_loops",
    "parameter_correctness",
    "tool_call_accuracy",
    "tool_selection_f1",
    "tool_routing_accuracy",
    "plan_order",
    "reference_tool_correctness",
    "trajectory_match",
    "step_ratio",
    "tool_constraints",
]
STEP_JUDGES = [
    "tool_correctness",
    "argument_correctness",
    "step_efficiency",
    "plan_adherence",
    "plan_quality",
    "tool_argument_accuracy",
    "step_faithfulness",
    "tool_call_necessity",
    "trajectory_efficiency",
    "trajectory_judge",
]


def crew_case(*, recorded: bool) -> EvalCase:
    """A crew's run as OpenInference's CrewAI spans import it: the crew's span alone (the
    importer marks such a trace), with every expectation the step metrics read."""
    trace = Trace(
        input="Where is order A-1?",
        output="A-1 has shipped.",
        spans=[Span(kind=SpanKind.CHAIN, name="Crew.kickoff", start_time=0.0, end_time=3.0)],
        status=RunStatus.OK,
        metadata={} if recorded else {STEPS_UNRECORDED: True},
    )
    return EvalCase(
        trace=trace,
        expected_tool_calls=["lookup_order"],
        minimum_steps=1,
        tools_must_succeed=["lookup_order"],
    )


@pytest.mark.parametrize("name", STEP_METRICS + STEP_JUDGES)
def test_a_trace_whose_steps_were_not_recorded_is_not_scored_on_them(
    name: str, judge_server: JudgeServer
) -> None:
    # the crew called lookup_order; its spans do not say so. "no tool calls" would pass
    # tool_failures and tool_call_loops, and fail trajectory_match, on calls nobody saw
    options = {"judge": judge(judge_server)} if name in STEP_JUDGES else {}
    result = create_metric(name, **options).measure(crew_case(recorded=False))
    assert (result.score, result.success, result.skipped, result.error) == (None, None, True, None)
    assert result.reason == (
        "not scored: the trace was imported from spans that record no model or tool call, "
        "only the run's input and output, so its steps are unknown"
    )
    assert result.metadata == {"steps_recorded": False}
    assert judge_server.requests == []  # no judge asked about steps it cannot see


def test_a_recorded_run_with_no_tool_call_is_still_scored() -> None:
    case = crew_case(recorded=True)
    assert case.trace is not None and case.trace.steps_recorded
    scores = {
        name: create_metric(name).measure(case).score
        for name in ("tool_failures", "tool_call_loops", "trajectory_match", "tool_constraints")
    }
    # no call made: nothing failed or looped, the expected call is missing, and the tool
    # that had to succeed was never called
    assert scores == {
        "tool_failures": 1.0,
        "tool_call_loops": 1.0,
        "trajectory_match": 0.0,
        "tool_constraints": 0.0,
    }


# --- assert_eval never passes a check that did not run ------------------------------------


def test_assert_eval_fails_a_metric_that_was_skipped() -> None:
    # a plain trace has no expected_tool_calls: tool_call_accuracy checks nothing on it
    trace = run([SAME])
    with pytest.raises(AssertionError) as failed:
        assert_eval(trace, ["tool_call_accuracy", "tool_call_loops"])
    assert str(failed.value) == (
        "agenteval: tool_call_accuracy: skipped — no expectation: the case gives no "
        "expected_tool_calls; a skipped metric checked nothing: give what it needs (an "
        "EvalCase with its expectation), leave it out, or pass allow_skipped=True"
    )
    accuracy, loops = assert_eval(
        trace, ["tool_call_accuracy", "tool_call_loops"], allow_skipped=True
    )
    assert (accuracy.skipped, loops.score) == (True, 1.0)
    expected = EvalCase.from_trace(
        trace, expected_tool_calls=[{"name": "lookup_order", "arguments": {"order_id": "A-1"}}]
    )
    [scored] = assert_eval(expected, ["tool_call_accuracy"])
    assert (scored.score, scored.skipped) == (1.0, False)


def test_assert_eval_fails_when_no_metric_scored_even_with_skips_allowed() -> None:
    with pytest.raises(AssertionError) as failed:
        assert_eval(run([SAME]), ["tool_call_accuracy", "end_state"], allow_skipped=True)
    assert str(failed.value) == (
        "agenteval: tool_call_accuracy: skipped — no expectation: the case gives no "
        "expected_tool_calls; end_state: skipped — no expectation: the case gives no "
        "expected_state; no metric scored the run"
    )


@pytest.mark.parametrize(
    ("status", "fields", "why"),
    [
        (
            RunStatus.ERROR,
            {"error": "ValueError: no order Z-9"},
            "error): ValueError: no order Z-9",
        ),
        (
            RunStatus.LIMIT,
            {"status_reason": "recursion limit of 25"},
            "limit): recursion limit of 25",
        ),
    ],
)
def test_assert_eval_fails_a_run_that_did_not_complete(
    status: RunStatus, fields: dict[str, Any], why: str
) -> None:
    # no loop, so tool_call_loops passes; the run still failed, as a suite's attempt would
    with pytest.raises(AssertionError) as failed:
        assert_eval(run([SAME], output=None, status=status, **fields), ["tool_call_loops"])
    assert str(failed.value) == f"agenteval: the run did not complete ({why}"
    # a run paused for a human has not failed
    [loops] = assert_eval(run([SAME], status=RunStatus.INTERRUPTED), ["tool_call_loops"])
    assert loops.score == 1.0
