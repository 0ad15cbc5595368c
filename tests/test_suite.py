"""EvalSuite: k attempts per case, pass/fail per run, pass@k / pass^k with intervals."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import runpy
from pathlib import Path

import pytest

from agenteval_core import (
    AgentStep,
    EvalCase,
    EvalSuite,
    MetricInputError,
    ToolCall,
    Trace,
    estimate_pass_k,
    mean_pass_k,
)
from agenteval_core.metrics import Coherence, ToolCallAccuracy


def recorded_case(case_id: str) -> EvalCase:
    return EvalCase(
        id=case_id,
        input="Search for recent AI papers and write a summary",
        agent_trace=[
            AgentStep(tool_calls=[ToolCall(name="search", arguments={"query": "AI papers 2025"})]),
            AgentStep(tool_calls=[ToolCall(name="summarize")], output="Here are the papers"),
        ],
        expected_tool_calls=["search", "summarize"],
    )


def test_seed_style_suite_with_recorded_traces() -> None:
    suite = (
        EvalSuite("Agent Eval").add_cases([recorded_case("c1")]).add_evaluators(ToolCallAccuracy())
    )
    report = suite.run(lambda task: "Here are the key AI papers", k=2)
    case = report.cases[0]
    assert (
        case.passes == 2 and [run.output for run in case.runs] == ["Here are the key AI papers"] * 2
    )
    assert report.estimate_pass_at_k == 1.0 and report.estimate_pass_pow_k == 1.0
    # the headline is the posterior mean: Beta(3, 1), E[p²] = 3/4 · 4/5 = 0.6, and
    # pass@2 = 1 − E[(1 − p)²] with 1 − p ~ Beta(1, 3): 1 − 1/4 · 2/5 = 0.9
    assert report.pass_pow_k == pytest.approx(0.6) and report.pass_at_k == pytest.approx(0.9)
    assert case.runs[0].results[0].score == 1.0 and case.runs[0].outcome == "passed"


def test_run_and_arun_share_one_options_definition_and_refuse_a_misspelt_one() -> None:
    suite = (
        EvalSuite("Agent Eval").add_cases([recorded_case("c1")]).add_evaluators(ToolCallAccuracy())
    )
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'attmpts'"):
        suite.run(lambda task: "x", k=2, attmpts=3)  # type: ignore[call-arg]
    report = suite.run(lambda task: "Here are the key AI papers", k=2, attempts=3, prior=(1, 1))
    assert [len(case.runs) for case in report.cases] == [3]
    report = asyncio.run(suite.arun(lambda task: "Here", k=1, attempts=2, progress=False))
    assert [len(case.runs) for case in report.cases] == [2]


def test_pass_counts_estimates_and_failures() -> None:
    # of 5 attempts the agent calls the right tool on 0, 1, 3, raises on 2, calls search on 4
    outcomes = itertools.count()

    def agent(question: str) -> Trace:
        attempt = next(outcomes)
        if attempt == 2:
            raise RuntimeError("tool server down")
        name = "lookup" if attempt != 4 else "search"
        return Trace.from_steps(
            question, [AgentStep(tool_calls=[ToolCall(name=name)], output="ok")]
        )

    case = EvalCase(id="q", input="Where is A-1?", expected_tool_calls=["lookup"])
    report = (
        EvalSuite("s")
        .add_cases(case)
        .add_evaluators("tool_call_accuracy")
        .run(agent, k=2, attempts=5, estimator="unbiased", concurrency=1)
    )
    runs = report.cases[0].runs
    assert [run.passed for run in runs] == [True, True, False, True, False]
    assert runs[2].error == "RuntimeError: tool server down" and runs[2].results == []
    estimate = report.cases[0].estimate
    # n=5, c=3, k=2: unbiased pass@2 = 1 − C(2,2)/C(5,2) = 0.9; pass^2 = C(3,2)/C(5,2) = 0.3
    assert estimate.pass_at_k == pytest.approx(0.9) and estimate.pass_pow_k == pytest.approx(0.3)
    # posterior Beta(4, 3): E[p²] = 4·5/(7·8) = 20/56
    assert estimate.pass_pow_k_mean == pytest.approx(20 / 56)
    assert report.pooled.n == 5 and report.pooled.c == 3
    assert json.loads(report.to_json())["cases"][0]["passes"] == 3
    assert "pass^2" in report.summary()


def test_async_agent_and_skipped_metrics_do_not_fail_a_run() -> None:
    async def agent(question: str) -> str:
        await asyncio.sleep(0)
        return "answer"

    # tool_call_accuracy is skipped (no expectation), coherence of "" input scores 1.0
    case = EvalCase(id="x", input="")
    report = (
        EvalSuite("a")
        .add_cases(case)
        .add_evaluators(ToolCallAccuracy(), Coherence())
        .run(agent, k=3)
    )
    assert report.cases[0].passes == 3
    assert report.metrics[0]["skipped"] == 3


def test_an_agent_that_returns_only_its_answer_is_told_what_tool_checks_need() -> None:
    # a regression case checks the run's tool calls; an agent function returning what
    # LangGraph's invoke returns (the state) gives the suite no trace to check them on
    def agent(question: str) -> dict[str, object]:
        return {"messages": [("user", question), ("ai", "Booked.")]}

    case = EvalCase(id="rome", input="Book a hotel in Rome", metrics=["tool_failures"])
    [case_report] = EvalSuite("regressions").add_cases(case).run(agent, k=1).cases
    [run] = case_report.runs
    assert (run.outcome, run.reason) == (
        "failed",
        "tool_failures: error: invalid input: the case has no trace whose tool calls to "
        "check (a suite's agent function returns the Trace an adapter captured of its run, "
        "not only its answer)",
    )


def test_clear_errors_for_misuse() -> None:
    with pytest.raises(MetricInputError, match="no cases"):
        EvalSuite("empty").add_evaluators("coherence").run(k=1)
    with pytest.raises(MetricInputError, match="no evaluators"):
        EvalSuite("empty").add_cases(recorded_case("c")).run(k=1)
    with pytest.raises(MetricInputError, match="attempts must be >= k"):
        EvalSuite("s").add_cases(recorded_case("c")).add_evaluators("coherence").run(
            k=3, attempts=2
        )
    with pytest.raises(MetricInputError, match="trace metrics"):
        EvalSuite("s").add_evaluators("agent_reliability")


def test_example_runs() -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "test_suite_pass_at_k.py"
    namespace = runpy.run_path(str(example))
    report = namespace["suite"].run(namespace["run_agent"], k=3, attempts=10, estimator="unbiased")
    assert len(report.cases) == 2 and report.attempts == 10


def test_headline_figures_and_their_intervals_describe_one_quantity() -> None:
    # One case passes 10 of 10, one 0 of 10; k = 3, plug-in: pass@3 = (1 + 0) / 2 = 0.5.
    # Posteriors Beta(11, 1) and Beta(1, 11). pass@3 = 1 − E[(1 − p)^3] with 1 − p ~ Beta(β, α):
    #   case A: 1 − (1·2·3)/(12·13·14) = 1 − 6/2184;  case B: 1 − (11·12·13)/(12·13·14) = 3/14
    # Var of case B's (1 − p)^3: E[(1 − p)^6] − E[(1 − p)^3]² = 11/17 − (11/14)²;
    # case A's: (1·…·6)/(12·…·17) − (6/2184)².
    estimates = [
        estimate_pass_k(10, 10, 3, prior=(1.0, 1.0)),
        estimate_pass_k(10, 0, 3, prior=(1.0, 1.0)),
    ]
    mean = mean_pass_k(estimates)
    assert (mean.pass_at_k, mean.pass_pow_k) == (0.5, 0.5)
    centre = ((1 - 6 / 2184) + 3 / 14) / 2
    var_a = math.prod(range(1, 7)) / math.prod(range(12, 18)) - (6 / 2184) ** 2
    var_b = 11 / 17 - (11 / 14) ** 2
    spread = 1.959963984540054 * math.sqrt(var_a + var_b) / 2
    assert mean.pass_at_k_mean == pytest.approx(centre)
    assert mean.pass_at_k_ci == pytest.approx((centre - spread, centre + spread))
    low, high = mean.pass_at_k_ci
    assert low < mean.pass_at_k < high  # the headline lies inside its own interval
    low, high = mean.pass_pow_k_ci
    assert low < mean.pass_pow_k < high
