"""The pytest plugin, run in a real inner pytest session (pytester), each in a process of its
own: pytester's in-process run forgets the modules the inner session imported, and numpy's,
imported again by a later test of the outer session, refuses to load twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def test_assert_eval_failure_names_score_threshold_and_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from agenteval_core import AgentStep, EvalCase, ToolCall
        from agenteval_core.pytest_plugin import assert_eval

        def case(calls):
            return EvalCase(
                input="Search and summarize",
                agent_trace=[AgentStep(tool_calls=[ToolCall(name=c) for c in calls], output="done")],
                expected_tool_calls=["search", "summarize"],
            )

        def test_good():
            results = assert_eval(case(["search", "summarize"]), ["tool_call_accuracy"])
            assert results[0].score == 1.0

        def test_bad():
            assert_eval(case(["search"]), ["tool_call_accuracy", "tool_selection_f1"])
        """
    )
    result = pytester.runpytest_subprocess("--agenteval-report", "report.json")
    result.assert_outcomes(passed=1, failed=1)
    # tool_call_accuracy: 1 of 2 → 0.5 < 0.7; F1: 2·1/(2+1) = 0.667 < 0.7
    result.stdout.fnmatch_lines(
        [
            "*agenteval: tool_call_accuracy: score 0.500 < threshold 0.7 — 1 of 2 expected calls matched (unordered); "
            "tool_selection_f1: score 0.667 < threshold 0.7*"
        ]
    )
    report = json.loads((pytester.path / "report.json").read_text())
    assert [r["name"] for r in report["results"]] == [
        "tool_call_accuracy",
        "tool_call_accuracy",
        "tool_selection_f1",
    ]


def test_the_report_holds_every_workers_results_under_xdist(pytester: pytest.Pytester) -> None:
    # pytest -n: each worker asserts in a process of its own, and the report is written once
    pytester.makepyfile(
        """
        import pytest
        from agenteval_core import Trace
        from agenteval_core.pytest_plugin import assert_eval

        @pytest.mark.parametrize("i", range(6))
        def test_answer(i):
            assert_eval(Trace(id=f"t{i}", input="q", output=f"answer {i}"), ["tool_failures"])
        """
    )
    result = pytester.runpytest_subprocess("-n", "2", "--agenteval-report", "report.json")
    result.assert_outcomes(passed=6)
    results = json.loads((pytester.path / "report.json").read_text())["results"]
    assert sorted((r["trace_id"], r["name"], r["score"], r["reason"]) for r in results) == [
        (f"t{i}", "tool_failures", 1.0, "no tool calls") for i in range(6)
    ]


def test_k_runs_fixture_asserts_pass_k_bounds(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import itertools
        from agenteval_core import AgentStep, EvalCase, ToolCall, Trace

        def flaky_agent():
            # right tool on 3 of 4 attempts
            names = itertools.cycle(["search", "search", "browse", "search"])
            return lambda q: Trace.from_steps(q, [AgentStep(tool_calls=[ToolCall(name=next(names))], output="ok")])

        CASE = EvalCase(id="c1", input="find it", expected_tool_calls=["search"])

        def test_bounds_hold(agenteval_k_runs):
            # n=4, c=3, k=2: the bounds hold the posterior mean, Beta(4, 2):
            # pass^2 = 4/6 · 5/7 = 0.4762; pass@2 = 1 − (2/6 · 3/7) = 0.8571
            report = agenteval_k_runs(flaky_agent(), CASE, ["tool_call_accuracy"], k=2, attempts=4,
                                      min_pass_at_k=0.85, min_pass_pow_k=0.47)
            assert round(report.pass_pow_k, 4) == 0.4762 and round(report.pass_at_k, 4) == 0.8571
            # plug-in: pass@2 = 1 − 0.25² = 0.9375, pass^2 = 0.75² = 0.5625
            assert round(report.estimate_pass_pow_k, 4) == 0.5625

        def test_bounds_fail(agenteval_k_runs):
            agenteval_k_runs(flaky_agent(), CASE, ["tool_call_accuracy"], k=2, attempts=4, min_pass_pow_k=0.6)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*agenteval: pass^2 0.476 < min_pass_pow_k 0.6 (passes per case: c1: 3/4); attempts "
            "failed because: "
            "tool_call_accuracy 0.000 < 0.7: 0 of 1 expected calls matched (unordered)*"
        ]
    )


def test_the_plugin_imports_nothing_heavy_until_a_helper_is_used(tmp_path: Path) -> None:
    # pytest loads the plugin in every run of every project that has agenteval installed
    (tmp_path / "test_light.py").write_text(
        textwrap.dedent(
            """
            import sys

            HEAVY = ("numpy", "httpx", "jsonschema", "rich", "pydantic",
                     "agenteval_core.engine", "agenteval_core.metrics")

            def loaded():
                return sorted(name for name in HEAVY if name in sys.modules)

            def test_a_project_test_pays_nothing():
                assert loaded() == []

            def test_a_helper_loads_what_it_needs():
                from agenteval_core import AgentStep, EvalCase, ToolCall
                from agenteval_core.pytest_plugin import assert_eval

                case = EvalCase(
                    input="q",
                    agent_trace=[AgentStep(tool_calls=[ToolCall(name="search")], output="a")],
                    expected_tool_calls=["search"],
                )
                assert assert_eval(case, ["tool_call_accuracy"])[0].score == 1.0
                assert "agenteval_core.engine" in loaded()
            """
        )
    )
    # only this plugin, as its entry point loads it (no other plugin's imports)
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "agenteval_core.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "test_light.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
