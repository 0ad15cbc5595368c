"""A suite never passes on nothing: attempts with nothing scored, runs that did not complete,
agents that return their own case; headlines inside their intervals."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import math
import threading
import uuid
from pathlib import Path
from typing import Any

import hotel_agent
import pytest
from agenteval_langchain import AgentEvalCallbackHandler
from agenteval_langchain.testing import ScriptedChatModel, tool_call
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agenteval_core import (
    AgentStep,
    EvalCase,
    EvalSuite,
    MetricInputError,
    OnlineEvaluator,
    RunStatus,
    ToolCall,
    Trace,
    estimate_pass_k,
    read_capture,
)
from agenteval_core.pytest_plugin import assert_eval, assert_pass_k

QUESTION = "Book a hotel in Rome"
FAILS = {0, 1, 2, 4, 5, 7, 8}  # the booking service fails on 7 of 10 attempts
LIES = {6}  # one attempt claims a booking without calling the tool
BOOKING_CASE = EvalCase(
    id="book-rome",
    input=QUESTION,
    expected_tool_calls=["book_hotel"],
    expected_state={"booked": True},
)


def hotel(kind: str) -> Any:
    """The 2-in-10 agent (real LangGraph runs), returning its answer, its trace, or an
    EvalCase that carries its end state."""
    attempts = itertools.count()

    def agent(question: str) -> str | Trace | EvalCase:
        index = next(attempts)
        trace = hotel_agent.traced(
            question, booking_fails=index in FAILS, behaviour="lie" if index in LIES else "book"
        )
        if kind == "string":
            return str(trace.output)
        if kind == "trace":
            return trace
        booked = any(c.name == "book_hotel" and not c.failed for c in trace.tool_calls())
        return EvalCase(trace=trace, actual_state={"booked": booked})

    return agent


@pytest.mark.parametrize("kind", ["string", "trace", "case"])
def test_the_two_in_ten_agent_fails_the_suite_and_the_bound(kind: str) -> None:
    suite = (
        EvalSuite("booking")
        .add_cases(BOOKING_CASE)
        .add_evaluators("tool_call_accuracy", "end_state")
    )
    report = suite.run(hotel(kind), k=3, attempts=10, concurrency=1)
    [case] = report.cases
    runs = case.runs
    if kind == "case":
        # the returned case supplied the run and its state; the suite's expectations stayed
        assert [run.passed for run in runs] == [i not in FAILS | LIES for i in range(10)]
        assert case.passes == 2
        assert runs[0].outcome == "failed" and runs[0].reason.startswith("end_state 0.000 < 1")
        assert "tool_call_accuracy 0.000 < 0.7" in runs[6].reason  # the lie: no call made
        # Beta(3, 9): E[p³] = 3·4·5 / (12·13·14)
        assert report.pass_pow_k == pytest.approx(60 / 2184)
    elif kind == "trace":
        # a trace holds no end state: end_state cannot be checked, so nothing passes
        assert case.passes == 0 and all("no actual_state recorded" in r.reason for r in runs)
    else:
        # an answer alone holds no trace: tool_call_accuracy cannot score it (an error)
        assert case.passes == 0
        assert all("tool_call_accuracy: error: invalid input" in r.reason for r in runs)
    assert report.pass_pow_k < 0.7
    with pytest.raises(AssertionError, match=r"pass\^3 0\.0"):
        assert_pass_k(
            hotel(kind),
            BOOKING_CASE,
            ["tool_call_accuracy", "end_state"],
            k=3,
            attempts=10,
            min_pass_pow_k=0.7,
        )


def test_given_no_bound_the_assertion_fails_on_any_failed_attempt() -> None:
    # an assertion that names no bound asserts every attempt: the 2-in-10 agent fails it
    with pytest.raises(AssertionError) as failed:
        assert_pass_k(hotel("case"), BOOKING_CASE, ["end_state"], k=1, attempts=10)
    # 2/10: 7 bookings failed, and the attempt that claims one made no call (booked: false)
    assert str(failed.value) == (
        "agenteval: 1 of 1 case(s) failed an attempt (book-rome); with no min_pass_at_k or "
        "min_pass_pow_k, every attempt must pass (passes per case: book-rome: 2/10); "
        "attempts failed because: end_state 0.000 < 1: 0 of 1 end-state fields as expected"
    )

    def always_books(question: str) -> EvalCase:
        trace = hotel_agent.traced(question, booking_fails=False, behaviour="book")
        return EvalCase(trace=trace, actual_state={"booked": True})

    report = assert_pass_k(always_books, BOOKING_CASE, ["end_state"], k=1, attempts=3)
    assert [case.passes for case in report.cases] == [3]


def test_the_failed_bookings_fail_on_the_trace_alone_with_tool_failures() -> None:
    suite = (
        EvalSuite("booking")
        .add_cases(BOOKING_CASE)
        .add_evaluators("tool_call_accuracy", "tool_failures")
    )
    report = suite.run(hotel("trace"), k=3, attempts=10, concurrency=1)
    [case] = report.cases
    assert case.passes == 2
    # a failed booking owned up to scores 0.5 (one call, failed, recovered by the answer)
    assert "tool_failures 0.500 < 0.7" in case.runs[0].reason


def test_a_case_without_expectations_is_not_scored_never_a_pass() -> None:
    case = EvalCase(input="Delete my account")

    def agent(question: str) -> Trace:
        call = ToolCall(name="delete_account", arguments={"user": "42"}, result="deleted")
        return Trace.from_steps(question, [AgentStep(tool_calls=[call], output="Deleted.")])

    report = (
        EvalSuite("s")
        .add_cases(case)
        .add_evaluators("tool_call_accuracy", "end_state")
        .run(agent, k=3, attempts=3)
    )
    [row] = report.cases
    assert row.passes == 0 and row.outcomes() == {"not_scored": 3}
    assert row.runs[0].reason == (
        "no metric scored this run (end_state: no expectation: the case gives no "
        "expected_state; tool_call_accuracy: no expectation: the case gives no "
        "expected_tool_calls)"
    )
    assert "3 not scored" in report.summary()


def test_a_run_the_model_refused_fails_its_attempt_unless_the_case_allows_one() -> None:
    # a refusal is no answer, and tool_failures gave the run without tool calls its 1.0:
    # a suite gating CI passed an agent whose model refused every request
    refused = hotel_agent.traced("Book a hotel in Rome", behaviour="refuse")
    assert (refused.status, refused.output, refused.refusal()) == (
        RunStatus.OK,
        hotel_agent.REFUSAL,
        hotel_agent.REFUSAL,
    )
    case = EvalCase(id="rome", input="Book a hotel in Rome")
    report = (
        EvalSuite("s").add_cases(case).add_evaluators("tool_failures").run(lambda q: refused, k=2)
    )
    runs = report.cases[0].runs
    assert [(r.outcome, r.passed) for r in runs] == [("refused", False)] * 2
    assert runs[0].reason == (
        f"the model refused to answer: {hotel_agent.REFUSAL} (allow_refusal=True on a case "
        "the agent should refuse)"
    )
    assert [(r.name, r.score, r.reason) for r in runs[0].results] == [
        ("tool_failures", 1.0, "no tool calls")
    ]
    assert "2 refused" in report.summary()
    with pytest.raises(AssertionError, match="the model refused to answer: I can't help"):
        assert_eval(refused, ["tool_failures"])
    # an input the agent should refuse: the refusal is no failure of its own
    allowed = case.model_copy(update={"allow_refusal": True})
    report = (
        EvalSuite("s").add_cases(allowed).add_evaluators("tool_failures").run(lambda q: refused)
    )
    assert report.cases[0].runs[0].outcome == "passed"
    assert assert_eval(EvalCase.from_trace(refused, allow_refusal=True), ["tool_failures"])


def test_a_refusal_the_run_raised_as_its_error_is_a_refusal() -> None:
    # LangChain's ModelRefusalMiddleware raises a refusal as ModelRefusalError (a structured
    # output's parser fails on one): the run ended in error, and every attempt was
    # `incomplete`, a case that allows the refusal included
    raised = hotel_agent.traced("Book a hotel in Rome", behaviour="refuse", raise_refusals=True)
    error = (
        f"ModelRefusalError: Model refused to produce the requested output: {hotel_agent.REFUSAL}"
    )
    assert (raised.status, raised.error, raised.refusal(), raised.raised_refusal()) == (
        RunStatus.ERROR,
        error,
        hotel_agent.REFUSAL,
        hotel_agent.REFUSAL,
    )
    case = EvalCase(id="rome", input="Book a hotel in Rome")
    suite = EvalSuite("s").add_evaluators("tool_failures", "coherence")
    [run] = suite.add_cases(case).run(lambda q: raised, k=1).cases[0].runs
    assert (run.outcome, run.reason) == (
        "refused",
        f"the model refused to answer: {hotel_agent.REFUSAL}; the run raised it as its error "
        f"({error}) (allow_refusal=True on a case the agent should refuse)",
    )
    # allowed: what the case allows is what the run did; the metrics skip a failed run
    allowed = case.model_copy(update={"id": "allowed", "allow_refusal": True})
    [run] = (
        EvalSuite("s")
        .add_evaluators("tool_failures", "coherence")
        .add_cases(allowed)
        .run(lambda q: raised, k=1)
        .cases[0]
        .runs
    )
    assert (run.outcome, run.reason) == (
        "passed",
        f"the model refused to answer: {hotel_agent.REFUSAL}, as the case allows; the run "
        f"raised it as its error ({error})",
    )
    assert [(r.name, r.skipped) for r in run.results] == [
        ("tool_failures", True),
        ("coherence", True),
    ]
    assert assert_eval(EvalCase.from_trace(raised, allow_refusal=True), ["tool_failures"])
    with pytest.raises(AssertionError, match="the run raised it as its error"):
        assert_eval(raised, ["tool_failures"])
    # a refusal returned as the answer, allowed, that no metric scores passes alike
    returned = hotel_agent.traced("Book a hotel in Rome", behaviour="refuse")
    report = (
        EvalSuite("s")
        .add_cases(allowed)
        .add_evaluators("tool_call_accuracy")
        .run(lambda q: returned, k=1)
    )
    [run] = report.cases[0].runs
    assert (run.outcome, run.reason) == (
        "passed",
        f"the model refused to answer: {hotel_agent.REFUSAL}, as the case allows",
    )


def test_stopped_runs_fail_their_attempt_interrupted_ones_do_not() -> None:
    # a real guard stop: the looping agent, stopped at its third identical search
    stopped = hotel_agent.traced("Find me a hotel in Paris", behaviour="loop", stop_on_loop=True)
    assert stopped.status is RunStatus.STOPPED
    report = (
        EvalSuite("s")
        .add_cases(EvalCase(id="paris", input="Find me a hotel in Paris"))
        .add_evaluators("coherence")  # it skips runs that did not complete
        .run(lambda question: stopped, k=2)
    )
    runs = report.cases[0].runs
    assert [r.outcome for r in runs] == ["incomplete", "incomplete"]
    assert runs[0].status == "stopped" and runs[0].reason.startswith(
        "the run did not complete (stopped): stopped by the loop guard: search_hotels called 3"
    )
    # a run paused for a human is control flow: scored on what it did, and it can pass
    paused = Trace.from_steps(
        "Refund order A-1?",
        [AgentStep(tool_calls=[ToolCall(name="lookup_order", result="shipped")])],
        status=RunStatus.INTERRUPTED,
    )
    case = EvalCase(id="refund", input="Refund order A-1?", expected_tool_calls=["lookup_order"])
    report = (
        EvalSuite("s").add_cases(case).add_evaluators("tool_call_accuracy").run(lambda q: paused)
    )
    assert report.cases[0].runs[0].outcome == "passed"
    # paused before it called a tool: the tool metrics have nothing to score, no pass
    asking = Trace.from_steps("Refund order A-1?", [], status=RunStatus.INTERRUPTED)
    report = (
        EvalSuite("s")
        .add_cases(EvalCase(id="refund", input="Refund order A-1?"))
        .add_evaluators("tool_failures", "tool_call_loops")
        .run(lambda q: asking)
    )
    [run] = report.cases[0].runs
    assert run.outcome == "not_scored"


def test_a_run_still_paused_after_the_cases_answers_is_no_pass() -> None:
    # a case whose captured run went on after the reviewer's approval; the agent now asks
    # for a second approval and its run ends paused there. Scored on what it did, its
    # lookup passed tool_failures: a pass that never reached the refund the case is about
    lookup = ToolCall(name="lookup_order", arguments={"id": "A-1"}, result="shipped")
    paused = Trace.from_steps(
        "Refund order A-1",
        [AgentStep(tool_calls=[lookup])],
        status=RunStatus.INTERRUPTED,
        status_reason="waiting for a human: approve 40 EUR?",
    )
    given: list[Any] = []

    def agent(request: str, resume: list[Any]) -> Trace:
        given.append(resume)
        return paused

    case = EvalCase(id="refund", input="Refund order A-1", resume=["approve"])
    report = EvalSuite("s").add_cases(case).add_evaluators("tool_failures").run(agent)
    [run] = report.cases[0].runs
    assert (given, run.outcome, run.passed) == ([["approve"]], "incomplete", False)
    assert run.reason == (
        "the run paused for a human again after the case's 1 answer(s), where the captured "
        "run went on (waiting for a human: approve 40 EUR?): what the case checks was not "
        "reached; give the agent each answer its run asks for"
    )
    # a case made from a run that itself ended paused may end paused again: scored
    captured = {"provenance": {"status": "interrupted"}}
    again = case.model_copy(update={"metadata": captured})
    report = EvalSuite("s").add_cases(again).add_evaluators("tool_failures").run(agent)
    assert report.cases[0].runs[0].outcome == "passed"


def _suite_of(cases: int, passes: int, attempts: int = 10) -> Any:
    """``cases`` cases, each passing its first ``passes`` of ``attempts`` attempts."""
    seen: dict[str, int] = {}

    def agent(question: str) -> Trace:
        seen[question] = seen.get(question, 0) + 1
        name = "lookup" if seen[question] <= passes else "search"
        return Trace.from_steps(question, [AgentStep(tool_calls=[ToolCall(name=name)])])

    return EvalSuite("s").add_cases(
        EvalCase(id=f"c{i}", input=f"q{i}", expected_tool_calls=["lookup"]) for i in range(cases)
    ).add_evaluators("tool_call_accuracy"), agent


def test_headlines_lie_inside_their_intervals() -> None:
    # 20 cases at 9/10, k = 3: each posterior Beta(10, 2); E[p³] = 10·11·12/(12·13·14) = 1320/2184,
    # E[p⁶] = 10·11/(16·17); the mean of 20 has variance 20·(E[p⁶] − E[p³]²)/20²
    suite, agent = _suite_of(20, 9)
    report = suite.run(agent, k=3, attempts=10, estimator="unbiased", concurrency=1)
    mean3, mean6 = 1320 / 2184, 110 / 272
    spread = 1.959963984540054 * math.sqrt(20 * (mean6 - mean3**2)) / 20
    assert report.pass_pow_k == pytest.approx(mean3)  # 0.604, not the unbiased 0.700
    assert report.mean.pass_pow_k_ci == pytest.approx((mean3 - spread, mean3 + spread))
    low, high = report.mean.pass_pow_k_ci
    assert (round(low, 3), round(high, 3)) == (0.518, 0.691) and low <= report.pass_pow_k <= high
    assert report.estimate_pass_pow_k == pytest.approx(0.7)  # C(9,3)/C(10,3), kept beside it

    # 20 cases at 10/10, plug-in: 1.000 before; now Beta(11, 1): E[p³] = 11/14
    suite, agent = _suite_of(20, 10)
    report = suite.run(agent, k=3, attempts=10, concurrency=1)
    low, high = report.mean.pass_pow_k_ci
    assert report.pass_pow_k == pytest.approx(11 / 14) and low <= 11 / 14 <= high
    assert report.estimate_pass_pow_k == 1.0
    # a case row shows its posterior median: (0.5^(1/11))³, inside [0.025^(3/11), 0.975^(3/11)]
    row = report.cases[0].estimate
    assert row.pass_pow_k_median == pytest.approx(0.5 ** (3 / 11))
    assert row.pass_pow_k_ci == pytest.approx((0.025 ** (3 / 11), 0.975 ** (3 / 11)))
    # pass@3: 1 − (1 − q)³ at the same quantiles: [1 − (1 − 0.025^(1/11))³, 1]
    assert "10/10  │ 1.000 [0.977, 1.000] │ 0.828 [0.366, 0.993]" in report.summary()


@settings(max_examples=300)
@given(n=st.integers(1, 200), data=st.data(), k=st.integers(1, 40))
def test_the_median_lies_inside_the_interval_where_the_mean_may_not(
    n: int, data: st.DataObject, k: int
) -> None:
    c = data.draw(st.integers(0, n))
    estimate = estimate_pass_k(n, c, k)
    for median, (low, high) in (
        (estimate.pass_pow_k_median, estimate.pass_pow_k_ci),
        (estimate.pass_at_k_median, estimate.pass_at_k_ci),
    ):
        assert low <= median <= high


def test_the_mean_can_fall_outside_the_interval() -> None:
    # why the rows show medians: 12 attempts, none passed, k = 10
    estimate = estimate_pass_k(12, 0, 10)
    assert estimate.pass_pow_k_mean > estimate.pass_pow_k_ci[1]


def test_cases_are_labelled_by_id_or_input() -> None:
    cases = [
        EvalCase(input="Where is my order A-1? It has been a week and nobody answers"),
        EvalCase(input="Refund"),
        EvalCase(input="Refund"),
        EvalCase(id="vip", input="anything"),
    ]
    report = (
        EvalSuite("s")
        .add_cases(cases)
        .add_evaluators("tool_call_loops")
        .run(lambda q: Trace.from_steps(q, [AgentStep(output="ok")]))
    )
    assert [c.label for c in report.cases] == [
        "Where is my order A-1? It has been a week and…",
        "Refund #1",
        "Refund #2",
        "vip",
    ]


def test_an_agent_that_raises_stop_iteration_fails_its_attempt_and_the_suite_goes_on() -> None:
    # a StopIteration crossing into asyncio's future would leave the suite waiting forever
    def agent(question: str) -> Trace:
        return next(iter([]))

    case = EvalCase(id="c", input="q", expected_tool_calls=["lookup"])
    report = EvalSuite("s").add_cases(case).add_evaluators("tool_call_accuracy").run(agent, k=2)
    assert [run.outcome for run in report.cases[0].runs] == ["agent_error", "agent_error"]
    assert report.cases[0].runs[0].error == "RuntimeError: the agent raised StopIteration"


CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar("caller", default=None)


def looked_up(question: str) -> Trace:
    return Trace.from_steps(
        question, [AgentStep(tool_calls=[ToolCall(name="lookup", result="ok")])], output="done"
    )


def test_an_agent_that_hangs_fails_its_attempt_by_the_timeout_and_the_suite_goes_on() -> None:
    # a model call that never returns: without a timeout the suite (and CI) waited for ever
    release = threading.Event()
    seen: list[str | None] = []

    def agent(question: str) -> Trace:
        seen.append(CALLER.get())  # the caller's context reaches the agent's thread
        if question == "hangs":
            release.wait(60)
        return looked_up(question)

    cases = [
        EvalCase(id=name, input=name, expected_tool_calls=["lookup"]) for name in ("hangs", "ok")
    ]
    suite = EvalSuite("s").add_cases(cases).add_evaluators("tool_call_accuracy")
    CALLER.set("the test")
    try:
        report = suite.run(agent, k=2, timeout=0.5, concurrency=4)
    finally:
        release.set()  # the abandoned threads end here, not with the test process
    hung, fine = report.cases
    assert [(r.outcome, r.reason, r.error) for r in hung.runs] == [
        ("agent_timeout", "the agent did not return within 0.5 s", "timed out after 0.5 s")
    ] * 2
    assert [(r.outcome, r.passed) for r in fine.runs] == [("passed", True)] * 2
    assert (hung.passes, fine.passes) == (0, 2)
    assert seen == ["the test"] * 4


def test_an_async_agent_past_the_timeout_is_cancelled() -> None:
    cancelled: list[str] = []

    async def agent(question: str) -> Trace:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(question)
            raise
        return looked_up(question)

    case = EvalCase(id="c", input="q", expected_tool_calls=["lookup"])
    report = (
        EvalSuite("s")
        .add_cases(case)
        .add_evaluators("tool_call_accuracy")
        .run(agent, k=1, timeout=0.2)
    )
    [run] = report.cases[0].runs
    assert (run.outcome, run.reason) == ("agent_timeout", "the agent did not return within 0.2 s")
    assert cancelled == ["q"]
    with pytest.raises(AssertionError) as failed:
        assert_pass_k(agent, case, ["tool_call_accuracy"], k=1, timeout=0.2)
    assert str(failed.value) == (
        "agenteval: 1 of 1 case(s) failed an attempt (c); with no min_pass_at_k or "
        "min_pass_pow_k, every attempt must pass (passes per case: c: 0/1); attempts failed "
        "because: the agent did not return within 0.2 s"
    )


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan")])
def test_a_timeout_that_is_no_number_of_seconds_is_refused(timeout: float) -> None:
    suite = EvalSuite("s").add_cases(EvalCase(input="q")).add_evaluators("tool_call_accuracy")
    with pytest.raises(MetricInputError, match="timeout must be a number of seconds > 0"):
        suite.run(looked_up, k=1, timeout=timeout)


OFFER = "Hotel Roma Central has a room on Friday for 120 euros. Shall I book it?"
TURNS = [{"input": "Find me a hotel in Rome for Friday", "output": OFFER}]


def _answer(request: str, history: list[dict[str, Any]]) -> Trace:
    """A booking agent: with the offer in its history it books; asked "Yes, please." alone,
    it asks what to do, calling nothing."""
    if history and history[-1]["output"] == OFFER:
        booked = ToolCall(name="book_hotel", arguments={"hotel": "Roma Central"}, result="ok")
        return Trace.from_steps(request, [AgentStep(tool_calls=[booked])], output="Booked.")
    return Trace.from_steps(request, [], output="What would you like me to do?")


def test_a_follow_up_is_not_run_by_an_agent_that_cannot_be_given_its_conversation() -> None:
    # a loop captured after "Yes, please.": asked alone, the agent calls nothing, so no loop
    # and no failed tool, and the case passed every attempt with nothing it was about checked
    case = EvalCase(
        id="yes-please", input="Yes, please.", conversation=TURNS,
        metrics=["tool_failures", "tool_call_loops"],
    )  # fmt: skip
    asked: list[str] = []

    def stateless(request: str) -> Trace:
        asked.append(request)
        return _answer(request, [])

    report = EvalSuite("s").add_cases(case).run(stateless, k=1, attempts=3)
    assert asked == []
    assert [(r.outcome, r.passed, r.error) for r in report.cases[0].runs] == [
        ("out_of_context", False, None)
    ] * 3
    assert (
        report.cases[0]
        .runs[0]
        .reason.startswith(
            "not run: the request only answers the case's earlier turns, and the agent function "
            "takes no `conversation` parameter"
        )
    )
    assert "3 out of context" in report.summary()

    given: list[list[dict[str, Any]]] = []

    def with_history(request: str, conversation: list[dict[str, Any]]) -> Trace:
        given.append(conversation)
        return _answer(request, conversation)

    report = EvalSuite("s").add_cases(case).run(with_history, k=1, attempts=3)
    assert given == [TURNS] * 3
    assert [(r.outcome, r.reason) for r in report.cases[0].runs] == [
        ("passed", "scored by tool_failures, tool_call_loops; none failed")
    ] * 3


def test_a_request_that_stands_alone_runs_without_its_earlier_turns() -> None:
    # a stateless agent is asked a self-contained request the same way in or out of a session
    case = EvalCase(
        id="rome", input="Book Hotel Roma Central in Rome for Friday", conversation=TURNS,
        metrics=["tool_failures"],
    )  # fmt: skip
    asked: list[str] = []

    def stateless(request: str) -> Trace:
        asked.append(request)
        booked = ToolCall(name="book_hotel", arguments={"hotel": "Roma Central"}, result="ok")
        return Trace.from_steps(request, [AgentStep(tool_calls=[booked])], output="Booked.")

    report = EvalSuite("s").add_cases(case).run(stateless, k=1, attempts=2)
    assert asked == [case.input] * 2
    assert [r.outcome for r in report.cases[0].runs] == ["passed", "passed"]


def refunds_agent() -> Any:
    """A LangGraph agent that refunds the order it is asked about: A-1 three times over (a
    loop), any other once."""

    def refund(order_id: str) -> str:
        """Refund an order."""
        return f"refunded {order_id}"

    def reply(messages: list[BaseMessage]) -> AIMessage:
        request, last = str(messages[0].content), messages[-1]
        done = sum(isinstance(message, ToolMessage) for message in messages)
        order = request.split()[-1]
        if isinstance(last, HumanMessage) or (order == "A-1" and done < 3):
            return AIMessage("", tool_calls=[tool_call("refund", f"c{done}", order_id=order)])
        return AIMessage(f"Done: {last.content}")

    return create_agent(ScriptedChatModel(reply=reply), tools=[refund])


REFUNDS = [
    EvalCase(id="loops", input="Refund A-1", metrics=["tool_call_loops"]),
    EvalCase(id="refunds", input="Refund A-2", metrics=["tool_call_loops"]),
]


def test_an_evaluator_per_attempt_returns_its_own_run_while_others_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/regressions.md's agent function: an evaluator per attempt, on the default
    # capture file, which the attempts run at once share. captured() read the whole file, so
    # its last trace was whichever attempt's ended last: the looping case passed on the
    # other's run
    monkeypatch.chdir(tmp_path)
    both_ran = threading.Barrier(2, timeout=30)

    def run_agent(request: str) -> Trace:
        with OnlineEvaluator(log=False) as evaluator:
            config: Any = {
                "callbacks": [AgentEvalCallbackHandler(evaluator)],
                "configurable": {"thread_id": str(uuid.uuid4())},
            }
            refunds_agent().invoke({"messages": [("user", request)]}, config)
            assert evaluator.flush(30)
            both_ran.wait()  # both runs are on file before either is read back
            return evaluator.captured()[-1]

    report = EvalSuite("refunds").add_cases(REFUNDS).run(run_agent, concurrency=2)
    assert [
        (run.case_id, run.outcome, run.output, run.reason)
        for case in report.cases
        for run in case.runs
    ] == [
        (
            "loops",
            "failed",
            "Done: refunded A-1",
            "tool_call_loops 0.000 < 0.5: refund called 3 times with the same arguments "
            '{"order_id": "A-1"}',
        ),
        ("refunds", "passed", "Done: refunded A-2", "scored by tool_call_loops; none failed"),
    ]
    shared = read_capture(tmp_path / "agenteval-capture.jsonl")
    assert sorted(t.input for t in shared) == ["Refund A-1", "Refund A-2"]


def test_a_trace_returned_for_another_case_is_no_run_of_this_one() -> None:
    # an agent function that hands back a run it returned before, another case's: scored as
    # this case's run, the other case's pass was this one's
    shared = looked_up("Where is A-1?")
    cases = [
        EvalCase(id="first", input="Where is A-1?", expected_tool_calls=["lookup"]),
        EvalCase(id="second", input="Where is A-2?", expected_tool_calls=["lookup"]),
    ]
    report = (
        EvalSuite("s")
        .add_cases(cases)
        .add_evaluators("tool_call_accuracy")
        .run(lambda question: shared, k=2, concurrency=1)
    )
    said = (
        "the agent function returned a trace it had returned for another case (first; trace "
        f"{shared.id}): each attempt returns the trace of its own run. Attempts run at once "
        "(concurrency), and an evaluator they share holds all their runs, its last one perhaps "
        "another attempt's: give each attempt an OnlineEvaluator of its own (its captured() "
        "holds only its runs), or find the run by a session id of its own"
    )
    assert [
        (run.case_id, run.outcome, run.reason, run.error)
        for case in report.cases
        for run in case.runs
    ] == [
        ("first", "passed", "scored by tool_call_accuracy; none failed", None),
        ("first", "passed", "scored by tool_call_accuracy; none failed", None),
        ("second", "agent_error", said, "another case's run"),
        ("second", "agent_error", said, "another case's run"),
    ]


def test_the_blocking_forms_run_inside_a_running_event_loop(tmp_path: Path) -> None:
    # a notebook's cell, or an async test, runs in an event loop: suite.run, replay and
    # cases_from_capture raised "asyncio.run() cannot be called from a running event loop"
    from agenteval_core import cases_from_capture, replay

    seen: list[str | None] = []

    def agent(question: str) -> Trace:
        seen.append(CALLER.get())  # the caller's context reaches the agent, as outside a loop
        return looked_up(question)

    capture = tmp_path / "capture.jsonl"
    capture.write_text(looked_up("Where is A-1?").model_dump_json() + "\n")
    case = EvalCase(id="c", input="q", expected_tool_calls=["lookup"])

    async def cell() -> tuple[list[str], int, int]:
        CALLER.set("the notebook")
        report = EvalSuite("s").add_cases(case).add_evaluators("tool_call_accuracy").run(agent, k=2)
        return (
            [run.outcome for run in report.cases[0].runs],
            replay(capture, ["tool_failures"]).traces,
            len(cases_from_capture(capture, metrics=["tool_failures"])),
        )

    assert asyncio.run(cell()) == (["passed", "passed"], 1, 0)
    assert seen == ["the notebook"] * 2
