"""A run's tool calls against a reference trajectory, and the limits a regression case sets."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from .._errors import ErrorKind, MetricInputError
from ..schema._trace import EvalCase, ExpectedToolCall, ToolCall, Trace
from ._deterministic import _ExpectationMetric
from ._matching import in_reference_order
from ._protocol import Metric, MetricKind, Score, no_trace_to_check
from ._registry import register_metric

__all__ = ["ArgumentMatch", "ToolConstraints", "TrajectoryMatch", "TrajectoryMode"]

TrajectoryMode = Literal["strict", "unordered", "subset", "superset"]
"""``strict``: the same calls in the same order; ``unordered``: the same multiset of calls;
``subset``: every call the agent made is in the reference (it did nothing extra);
``superset``: every reference call was made (the agent may have done more)."""

ArgumentMatch = (
    Literal["exact", "ignore", "subset"] | Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
)
"""How a call's arguments must match a reference call's: ``exact`` (equal dicts), ``ignore``
(names only), ``subset`` (the reference's keys, with equal values; extra keys allowed), or a
function ``(reference, actual) -> bool``. A reference call without arguments matches any."""

_MODES = ("strict", "unordered", "subset", "superset")
_ABSENT = object()


def _arguments_agree(
    how: ArgumentMatch, reference: Mapping[str, Any] | None, actual: Mapping[str, Any]
) -> bool:
    if reference is None or how == "ignore":
        return True
    if how == "exact":
        return dict(reference) == dict(actual)
    if how == "subset":
        return all(actual.get(key, _ABSENT) == value for key, value in reference.items())
    return bool(how(reference, actual))


def _show(name: str, arguments: Mapping[str, Any] | None) -> str:
    if not arguments:
        return name
    return name + "(" + ", ".join(f"{k}={v!r}" for k, v in sorted(arguments.items())) + ")"


def _assign(agree: np.ndarray) -> dict[int, int]:
    """A largest one-to-one pairing of reference rows to call columns that agree (its size
    does not depend on the order of either list). Returns reference index → call index."""
    if agree.size == 0 or not agree.any():
        return {}
    from scipy.optimize import linear_sum_assignment  # here: scipy.optimize is slow to import

    rows, cols = linear_sum_assignment(agree.astype(float), maximize=True)
    return {int(i): int(j) for i, j in zip(rows, cols, strict=True) if agree[i, j]}


def _ordered(agree: np.ndarray) -> dict[int, int]:
    """A longest common subsequence of reference and calls, where positions match when they
    agree, as reference index → call index."""
    rows, cols = agree.shape
    table = np.zeros((rows + 1, cols + 1), dtype=int)
    for i in range(rows):
        for j in range(cols):
            table[i + 1, j + 1] = (
                table[i, j] + 1 if agree[i, j] else max(table[i, j + 1], table[i + 1, j])
            )
    kept: dict[int, int] = {}
    i, j = rows, cols
    while i and j:
        if agree[i - 1, j - 1] and table[i, j] == table[i - 1, j - 1] + 1:
            kept[i - 1] = j - 1
            i, j = i - 1, j - 1
        elif table[i - 1, j] >= table[i, j - 1]:
            i -= 1
        else:
            j -= 1
    return kept


@register_metric
class TrajectoryMatch(_ExpectationMetric):
    """The run's tool calls against the case's reference trajectory (``expected_tool_calls``).

    ``mode`` (see :data:`TrajectoryMode`): ``strict`` scores the longest in-order match /
    the longer of the two lists; ``unordered`` the one-to-one matches / the longer list;
    ``subset`` the matched calls / the calls made; ``superset`` the matched reference calls /
    the reference (in order, as a subsequence, with ``in_order=True``). ``arguments`` (see
    :data:`ArgumentMatch`) decides when a call matches a reference call. Matching is an
    optimal one-to-one assignment, so duplicates count once each, scores lie in [0, 1] and do
    not depend on the order of the reference list; calls made together in one model step
    (parallel calls) are not out of order among themselves. The reason names the missing,
    extra and out-of-order calls. Threshold 1.0: a mode is a requirement.
    """

    name = "trajectory_match"
    default_threshold: ClassVar[float] = 1.0

    def __init__(
        self,
        *,
        mode: TrajectoryMode = "unordered",
        arguments: ArgumentMatch = "exact",
        in_order: bool = False,
        threshold: float | None = None,
    ) -> None:
        super().__init__(threshold=threshold)
        if mode not in _MODES:
            raise MetricInputError(
                f"trajectory_match: mode must be one of {list(_MODES)}, got {mode!r}"
            )
        if not callable(arguments) and arguments not in ("exact", "ignore", "subset"):
            raise MetricInputError(
                "trajectory_match: arguments must be 'exact', 'ignore', 'subset' or a function "
                f"(reference, actual) -> bool, got {arguments!r}"
            )
        if in_order and mode != "superset":
            raise MetricInputError(
                f"trajectory_match: in_order applies to mode='superset' ('strict' is in order "
                f"already), got mode={mode!r}"
            )
        self.mode = mode
        self.arguments = arguments
        self.in_order = in_order

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        if case.expected_tool_calls is None:
            return Score.skip("no expectation: the case gives no expected_tool_calls")
        if case.trace is None:
            return Score.failure(
                "invalid input: the case has no trace (give trace= or a Trace)",
                error_kind=ErrorKind.INVALID_INPUT,
            )
        groups = [step.tool_calls for step in case.trace.steps() if step.tool_calls]
        return self.match(case, list(case.expected_tool_calls), groups)

    def match(
        self, case: EvalCase, reference: list[ExpectedToolCall], groups: list[list[ToolCall]]
    ) -> Score:
        """The score of the calls made, ``groups`` of them per model step in order,
        against the ``reference`` trajectory, in this metric's mode."""
        calls = [call for group in groups for call in group]
        references = [case.reference_for(expected) for expected in reference]
        agree = np.array(
            [
                [
                    expected.name == call.name
                    and _arguments_agree(self.arguments, references[i], call.arguments)
                    for call in calls
                ]
                for i, expected in enumerate(reference)
            ],
            dtype=bool,
        ).reshape(len(reference), len(calls))
        pairs = _assign(agree)
        ordered_mode = self.mode == "strict" or self.in_order
        out_of_order: list[int] = []
        matched = len(pairs)
        if ordered_mode and calls:
            paired = {call: ref for ref, call in pairs.items()}
            position = {id(call): index for index, call in enumerate(calls)}
            order = in_reference_order(
                groups, lambda call: paired.get(position[id(call)], len(reference))
            )
            agree = agree[:, [position[id(call)] for call in order]]
            calls = order
            in_sequence = _ordered(agree)
            # the calls matched out of sequence: the best pairing of what the sequence left
            rest = agree.copy()
            rest[list(in_sequence), :] = False
            rest[:, list(in_sequence.values())] = False
            out_of_sequence = _assign(rest)
            out_of_order = sorted(out_of_sequence)
            pairs = in_sequence | out_of_sequence
            matched = len(in_sequence)
        missing = [i for i in range(len(reference)) if i not in pairs]
        extra = [j for j in range(len(calls)) if j not in set(pairs.values())]
        denominator = {
            "strict": max(len(reference), len(calls)),
            "unordered": max(len(reference), len(calls)),
            "subset": len(calls),
            "superset": len(reference),
        }[self.mode]
        value = matched / denominator if denominator else 1.0
        # what the mode counts: subset allows missing calls, superset extra ones
        counts_missing, counts_extra = self.mode != "subset", self.mode != "superset"
        metadata: dict[str, Any] = {
            "mode": self.mode,
            "arguments": self.arguments if isinstance(self.arguments, str) else "function",
            "in_order": ordered_mode,
            "reference": [_show(e.name, references[i]) for i, e in enumerate(reference)],
            "called": [_show(c.name, c.arguments) for c in calls],
            "matched": matched,
            "missing": [_show(reference[i].name, references[i]) for i in missing]
            if counts_missing
            else [],
            "extra": [_show(calls[j].name, calls[j].arguments) for j in extra]
            if counts_extra
            else [],
            "out_of_order": [_show(reference[i].name, references[i]) for i in out_of_order],
        }
        problems = [
            f"{label}: {', '.join(metadata[key])}"
            for key, label in (
                ("missing", "missing"),
                ("extra", "extra"),
                ("out_of_order", "out of order"),
            )
            if metadata[key]
        ]
        how = (
            f"{self.mode}{' in order' if self.in_order else ''}, arguments {metadata['arguments']}"
        )
        reason = (
            f"{matched} of {denominator} matched ({how})"
            + ("; " + "; ".join(problems) if problems else "")
            if denominator
            else f"nothing to match ({how})"
        )
        return Score(value, reason, metadata)


@register_metric
class ToolConstraints(Metric):
    """The limits a case sets on a run's tool calls: tools that must be called and succeed
    (``tools_must_succeed``: the tool's last call did not fail, so a retry that worked is a
    success) and calls that may be made at most so many times (``tool_call_limits``, e.g. a
    call the loop guard refused). Score: the share of constraints kept; threshold 1.0.
    Skipped when the case sets none."""

    name = "tool_constraints"
    reads_steps: ClassVar[bool] = True
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC
    default_threshold: ClassVar[float] = 1.0
    needs_expectations: ClassVar[bool] = True

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        limits, tools = case.tool_call_limits or [], case.tools_must_succeed or []
        if not limits and not tools:
            return Score.skip(
                "no expectation: the case gives no tools_must_succeed or tool_call_limits"
            )
        if case.trace is None:
            return no_trace_to_check()
        calls = case.trace.tool_calls()
        broken: list[str] = []
        checks: list[dict[str, Any]] = []
        for tool in tools:
            called = [call for call in calls if call.name == tool]
            failed = sum(1 for call in called if call.failed)
            # a failure the run's next call of the tool made good (a retry of a 503 that
            # worked) is no failure of the tool's: CI against a real service saw it flake
            ended_failed = bool(called) and called[-1].failed
            checks.append(
                {
                    "tool_must_succeed": tool,
                    "calls": len(called),
                    "failed_calls": failed,
                    "last_call_failed": ended_failed,
                    "kept": bool(called) and not ended_failed,
                }
            )
            # a tool the run never called did not succeed: an agent that skips the booking
            # its regression case is about has not booked anything
            if not called:
                broken.append(f"{tool} was never called (it must be called and succeed)")
            elif ended_failed:
                broken.append(f"{tool}'s last call failed ({failed} of {len(called)} failed)")
        for limit in limits:
            made = sum(1 for call in calls if limit.matches(call))
            kept = made <= limit.max_calls
            checks.append(
                {
                    "limit": _show(limit.name, limit.arguments),
                    "max_calls": limit.max_calls,
                    "calls": made,
                    "kept": kept,
                }
            )
            if not kept:
                broken.append(
                    f"{_show(limit.name, limit.arguments)} called {made} time(s), "
                    f"at most {limit.max_calls} allowed"
                )
        kept_count = sum(1 for check in checks if check["kept"])
        reason = (
            f"all {len(checks)} constraints kept"
            if not broken
            else f"{len(broken)} of {len(checks)} constraints broken: " + "; ".join(broken)
        )
        return Score(kept_count / len(checks), reason, {"checks": checks})
