"""trajectory_match modes and tool_constraints against hand-worked trajectories."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agenteval_core import (
    AgentStep,
    EvalCase,
    ExpectedToolCall,
    MetricInputError,
    ToolCall,
    ToolCallLimit,
    Trace,
)
from agenteval_core.metrics import ToolConstraints, TrajectoryMatch

Call = tuple[str, dict[str, Any]]


def case(reference: list[tuple[str, dict[str, Any] | None]], steps: list[list[Call]]) -> EvalCase:
    """A case whose run made ``steps`` (each inner list: calls made together in one model
    step, i.e. parallel calls) against the reference trajectory."""
    trace = Trace.from_steps(
        "q",
        [AgentStep(tool_calls=[ToolCall(name=n, arguments=a) for n, a in step]) for step in steps],
    )
    return EvalCase(
        trace=trace,
        expected_tool_calls=[ExpectedToolCall(name=n, arguments=a) for n, a in reference],
    )


A, B, C = ("a", {}), ("b", {}), ("c", {})
A1, A2 = ("a", {"x": 1}), ("a", {"x": 2})

# (reference, steps, mode, options, score, missing, extra, out of order), each worked by hand
TABLE: list[tuple[Any, ...]] = [
    # the same calls in the same order: every mode scores 1
    ([A, B], [[A], [B]], "strict", {}, 1.0, [], [], []),
    ([A, B], [[A], [B]], "unordered", {}, 1.0, [], [], []),
    ([A, B], [[A], [B]], "subset", {}, 1.0, [], [], []),
    ([A, B], [[A], [B]], "superset", {}, 1.0, [], [], []),
    # swapped, in separate steps: strict LCS 1 / max(2, 2); unordered 2 / 2 (the longest
    # in-order match keeps a, so b is the call out of order)
    ([A, B], [[B], [A]], "strict", {}, 0.5, [], [], ["b"]),
    ([A, B], [[B], [A]], "unordered", {}, 1.0, [], [], []),
    ([A, B], [[B], [A]], "superset", {"in_order": True}, 0.5, [], [], ["b"]),
    # swapped, but made together in one step (parallel): not out of order
    ([A, B], [[B, A]], "strict", {}, 1.0, [], [], []),
    ([A, B], [[B, A]], "superset", {"in_order": True}, 1.0, [], [], []),
    # a duplicated reference call made once: unordered 1 / max(2, 1); superset 1 / 2;
    # subset 1 / 1 (the agent did nothing extra)
    ([A, A], [[A]], "unordered", {}, 0.5, ["a"], [], []),
    ([A, A], [[A]], "superset", {}, 0.5, ["a"], [], []),
    ([A, A], [[A]], "subset", {}, 1.0, [], [], []),
    # a call made twice, once expected: the second is extra; superset 1 / 1
    ([A], [[A], [A]], "unordered", {}, 0.5, [], ["a"], []),
    ([A], [[A], [A]], "superset", {}, 1.0, [], [], []),
    ([A], [[A], [A]], "subset", {}, 0.5, [], ["a"], []),
    # one extra tool: superset 2 / 2, subset 2 / 3, strict 2 / 3
    ([A, B], [[A], [C], [B]], "superset", {"in_order": True}, 1.0, [], [], []),
    ([A, B], [[A], [C], [B]], "subset", {}, 2 / 3, [], ["c"], []),
    ([A, B], [[A], [C], [B]], "strict", {}, 2 / 3, [], ["c"], []),
    # arguments: exact refuses x=2 for x=1, ignore takes it, subset takes extra keys
    ([A1], [[A2]], "unordered", {}, 0.0, ["a(x=1)"], ["a(x=2)"], []),
    ([A1], [[A2]], "unordered", {"arguments": "ignore"}, 1.0, [], [], []),
    ([A1], [[("a", {"x": 1, "y": 0})]], "unordered", {"arguments": "subset"}, 1.0, [], [], []),
    ([A1], [[("a", {"x": 1, "y": 0})]], "unordered", {}, 0.0, ["a(x=1)"], ["a(x=1, y=0)"], []),
    # duplicates with different arguments, made in the other order: optimal assignment
    # pairs each with its own (a greedy first-come pairing would take x=1 for the first)
    ([A1, A2], [[A2], [A1]], "unordered", {}, 1.0, [], [], []),
    ([A1, A2], [[A2], [A1]], "strict", {}, 0.5, [], [], ["a(x=2)"]),
    # a reference call without arguments matches any arguments
    ([("a", None)], [[A2]], "unordered", {}, 1.0, [], [], []),
    # nothing expected, nothing made
    ([], [], "strict", {}, 1.0, [], [], []),
    ([], [[A]], "unordered", {}, 0.0, [], ["a"], []),
    ([], [[A]], "superset", {}, 1.0, [], [], []),
    ([A], [], "subset", {}, 1.0, [], [], []),
]


@pytest.mark.parametrize(
    ("reference", "steps", "mode", "options", "score", "missing", "extra", "out_of_order"), TABLE
)
def test_modes_against_hand_worked_trajectories(
    reference: Any,
    steps: Any,
    mode: Any,
    options: dict[str, Any],
    score: float,
    missing: list[str],
    extra: list[str],
    out_of_order: list[str],
) -> None:
    result = TrajectoryMatch(mode=mode, **options).measure(case(reference, steps))
    assert result.score == pytest.approx(score)
    assert result.success is (score == 1.0)  # threshold 1.0: a mode is a requirement
    meta = result.metadata
    assert (meta["missing"], meta["extra"], meta["out_of_order"]) == (missing, extra, out_of_order)
    for name in missing:
        assert f"missing: {name}" in result.reason or mode == "subset"
    for name in out_of_order:
        assert "out of order: " in result.reason and name in result.reason


def test_reason_names_missing_extra_and_out_of_order_calls() -> None:
    result = TrajectoryMatch(mode="strict").measure(case([A, B, C], [[C], [A], [("d", {})]]))
    # LCS of [a, b, c] and [c, a, d] is 1; assignment matches a and c; b missing, d extra
    assert result.score == pytest.approx(1 / 3)
    assert result.reason == (
        "1 of 3 matched (strict, arguments exact); missing: b; extra: d; out of order: c"
    )


def test_a_function_decides_argument_matches() -> None:
    def same_city(reference: Any, actual: Any) -> bool:
        return str(reference["city"]).lower() == str(actual.get("city", "")).lower()

    metric = TrajectoryMatch(arguments=same_city)
    good = metric.measure(case([("book", {"city": "Rome"})], [[("book", {"city": "ROME"})]]))
    bad = metric.measure(case([("book", {"city": "Rome"})], [[("book", {"city": "Oslo"})]]))
    assert (good.score, bad.score) == (1.0, 0.0)
    assert good.metadata["arguments"] == "function"


def test_skips_without_a_reference_and_refuses_bad_options() -> None:
    trace = Trace.from_steps("q", [AgentStep(tool_calls=[ToolCall(name="a")])])
    result = TrajectoryMatch().measure(EvalCase(trace=trace))
    assert result.skipped and "no expectation" in result.reason
    with pytest.raises(MetricInputError, match="mode must be one of"):
        TrajectoryMatch(mode="fuzzy")  # type: ignore[arg-type]
    with pytest.raises(MetricInputError, match="in_order applies to mode='superset'"):
        TrajectoryMatch(mode="unordered", in_order=True)
    with pytest.raises(MetricInputError, match="arguments must be"):
        TrajectoryMatch(arguments="loose")  # type: ignore[arg-type]


names = st.lists(st.sampled_from(["a", "b", "c"]), max_size=6)


@settings(max_examples=150)
@given(
    reference=names, made=names, mode=st.sampled_from(["strict", "unordered", "subset", "superset"])
)
def test_scores_stay_in_range_and_ignore_the_reference_order_when_unordered(
    reference: list[str], made: list[str], mode: str
) -> None:
    steps = [[(name, {})] for name in made]
    result = TrajectoryMatch(mode=mode).measure(case([(n, None) for n in reference], steps))  # type: ignore[arg-type]
    assert result.score is not None and 0.0 <= result.score <= 1.0
    if mode != "strict":
        for permuted in itertools.islice(itertools.permutations(reference), 6):
            again = TrajectoryMatch(mode=mode).measure(case([(n, None) for n in permuted], steps))  # type: ignore[arg-type]
            assert again.score == pytest.approx(result.score)


def test_tool_constraints_count_failures_and_limits() -> None:
    calls = [
        ToolCall(name="book_hotel", arguments={"city": "Rome"}, error="503"),
        ToolCall(name="search", arguments={"q": "hotels"}, result="3 hotels"),
        ToolCall(name="search", arguments={"q": "hotels"}, result="3 hotels"),
    ]
    trace = Trace.from_steps("q", [AgentStep(tool_calls=calls)])
    limits = [
        ToolCallLimit(name="search", arguments={"q": "hotels"}, max_calls=2),  # 2 made: kept
        ToolCallLimit(name="delete_account"),  # never: kept
        ToolCallLimit(name="search", max_calls=1),  # 2 made: broken
    ]
    result = ToolConstraints().measure(
        EvalCase(trace=trace, tools_must_succeed=["book_hotel", "search"], tool_call_limits=limits)
    )
    # 5 constraints: book_hotel failed (broken), search ok, two limits kept, one broken
    assert result.score == pytest.approx(3 / 5) and result.success is False
    assert result.reason == (
        "2 of 5 constraints broken: book_hotel's last call failed (1 of 1 failed); "
        "search called 2 time(s), at most 1 allowed"
    )
    assert ToolConstraints().measure(EvalCase(trace=trace)).skipped


def test_a_tool_that_must_succeed_and_was_never_called_breaks_its_constraint() -> None:
    # the regression case of a failed booking; the agent now answers without booking
    trace = Trace.from_steps(
        "Book a hotel in Rome",
        [AgentStep(tool_calls=[ToolCall(name="search", arguments={"q": "Rome"}, result="3")])],
        output="Your hotel in Rome is booked.",
    )
    case = EvalCase(trace=trace, tools_must_succeed=["book_hotel", "search"])
    result = ToolConstraints().measure(case)
    assert (result.score, result.success) == (0.5, False)
    assert result.reason == (
        "1 of 2 constraints broken: book_hotel was never called (it must be called and succeed)"
    )
    assert result.metadata == {
        "checks": [
            {
                "tool_must_succeed": "book_hotel",
                "calls": 0,
                "failed_calls": 0,
                "last_call_failed": False,
                "kept": False,
            },
            {
                "tool_must_succeed": "search",
                "calls": 1,
                "failed_calls": 0,
                "last_call_failed": False,
                "kept": True,
            },
        ]
    }


def test_a_tool_that_failed_then_worked_on_a_retry_succeeded() -> None:
    # a regression case's booking against the real service in CI: a 503, then the agent's
    # retry booked. The case failed ("book_hotel failed 1 time(s)") on a flake the agent
    # handled; a failure after which the tool never worked still breaks it
    down = ToolCall(name="book_hotel", arguments={"city": "Rome"}, error="503 Service Unavailable")
    booked = ToolCall(name="book_hotel", arguments={"city": "Rome"}, result="booked H-4")

    def constraint(*calls: ToolCall) -> tuple[float | None, str, dict[str, Any]]:
        steps = [AgentStep(tool_calls=[call]) for call in calls]
        case = EvalCase(
            trace=Trace.from_steps("Book a hotel in Rome", steps, output="Booked: H-4."),
            tools_must_succeed=["book_hotel"],
        )
        result = ToolConstraints().measure(case)
        return result.score, result.reason, result.metadata["checks"][0]

    assert constraint(down, booked) == (
        1.0,
        "all 1 constraints kept",
        {
            "tool_must_succeed": "book_hotel",
            "calls": 2,
            "failed_calls": 1,
            "last_call_failed": False,
            "kept": True,
        },
    )
    assert constraint(booked, down)[:2] == (
        0.0,
        "1 of 1 constraints broken: book_hotel's last call failed (1 of 2 failed)",
    )
