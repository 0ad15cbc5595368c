"""Tables that fit their medium: at 80 columns, at 200, and in a pipe (a CI log) no name,
number or word of a reason is broken across lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from agenteval_core import AgentStep, EvalCase, EvalSuite, ToolCall, Trace, list_metrics
from agenteval_core.cli import cli

EXAMPLE = Path(__file__).parent.parent / "examples" / "captures" / "support_agent.jsonl"
MEDIA = [
    pytest.param({"COLUMNS": "80"}, 80, id="80-columns"),
    pytest.param({"COLUMNS": "200"}, 200, id="200-columns"),
    pytest.param({}, None, id="pipe"),
]


def run(args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("COLUMNS", raising=False)
    done = CliRunner().invoke(cli, args, env=env)
    assert done.exit_code == 0, done.output
    return done.output


def assert_whole(output: str, texts: list[str], width: int | None) -> None:
    """Every word of ``texts`` appears whole, and no line is wider than ``width``."""
    for text in texts:
        for word in text.split():
            assert word in output, f"{word!r} broken or missing in:\n{output}"
    if width is not None:
        too_wide = [line for line in output.splitlines() if len(line) > width]
        assert not too_wide, too_wide


@pytest.mark.parametrize(("env", "width"), MEDIA)
def test_the_replay_tables_break_no_word(
    env: dict[str, str], width: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = "tool_call_accuracy,reference_tool_correctness,coherence"
    sessions = "agent_consistency,agent_reliability"
    output = run(["replay", str(EXAMPLE), "--metrics", f"{metrics},{sessions}"], env, monkeypatch)
    assert_whole(
        output,
        [
            *metrics.split(","),
            *sessions.split(","),
            "session-1 session-2 session-3 0.654 0.404 0.467 0.616 0.667",
            # the reasons, under the tables
            "tool_call_accuracy: not scored in 9 traces: no expectation: the case gives no "
            "expected_tool_calls",
            "agent_consistency: not scored in 3 sessions: no trace has a confidence signal to "
            "evaluate (the confidence metric gives it: score with a judge)",
            # flagged traces, with the first words of what the user asked
            "session-2 flagged: session-2-t1 “All of it, 40 euros, it was late”",
        ],
        width,
    )
    if width is None:  # a log: each row whole on its line
        lines = output.splitlines()
        assert any("coherence" in line and "0.616" in line and "0.667" in line for line in lines)
        assert any(
            line.startswith("session-3 flagged: session-3-t1 “Hello? Is it ready?”")
            for line in lines
        )
    if width == 200:
        assert re.search(r"│ tool_call_accuracy +│", output)  # wide enough: a boxed table


@pytest.mark.parametrize(("env", "width"), MEDIA)
def test_the_metric_list_breaks_no_word(
    env: dict[str, str], width: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = run(["metrics"], env, monkeypatch)
    infos = list_metrics()
    assert_whole(output, [info.name for info in infos], width)
    # one entry per metric: its name starts a line, continuation lines are indented further
    listed = [
        line.split()[0]
        for line in output.splitlines()
        if line[:3].strip() and line.startswith("  ")
    ]
    assert sorted(listed) == sorted([info.name for info in infos] + ["best_of"])
    flowing = " ".join(output.split())
    assert (
        "tool_call_loops 0.5 Whether a run stayed out of loops: the live guard's patterns over "
        "its tool calls."
    ) in flowing  # wrapped at spaces, never cut off
    if width is None:
        assert any(
            line.endswith("over its tool calls.") and "tool_call_loops" in line
            for line in output.splitlines()
        )


@pytest.mark.parametrize(("env", "width"), MEDIA)
def test_the_suite_tables_break_no_word(
    env: dict[str, str], width: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = EvalCase(
        id="order-status-with-a-long-case-name",
        input="Where is order A-1?",
        expected_tool_calls=["lookup_order"],
    )

    def agent(question: str) -> Trace:
        return Trace.from_steps(
            question,
            [AgentStep(tool_calls=[ToolCall(name="lookup_order")], output="It shipped.")],
        )

    monkeypatch.delenv("COLUMNS", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    report = (
        EvalSuite("orders")
        .add_cases(case)
        .add_evaluators("tool_call_accuracy", "end_state")
        .run(agent, k=2, attempts=3, progress=False)
    )
    output = report.summary()
    assert_whole(
        output,
        [
            "order-status-with-a-long-case-name 3/3",
            # pass@2 = pass^2 medians of Beta(4, 1) and credible intervals, as the table shows
            f"{report.cases[0].estimate.pass_at_k_median:.3f}",
            "tool_call_accuracy 1.000 end_state",
            "end_state: not scored in 3 runs: no expectation: the case gives no expected_state",
        ],
        width,
    )
