"""Deterministic metrics: tool matching, schema checks, end state and step counts (no LLM)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import jsonschema_rs
import numpy as np
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .._errors import ErrorKind, MetricInputError
from .._text import content_tokens
from ..schema._trace import EvalCase, ExpectedToolCall, ToolCall, Trace, text_of
from ._matching import assign_by_name, in_reference_order, lcs_length, multiset_overlap
from ._protocol import Metric, MetricKind, Score
from ._registry import register_metric

__all__ = [
    "EndState",
    "ParameterCorrectness",
    "PlanOrder",
    "ReferenceToolCorrectness",
    "StepRatio",
    "ToolCallAccuracy",
    "ToolRoutingAccuracy",
    "ToolSelectionF1",
    "argument_match",
]


_MISSING = object()


def argument_match(reference: Mapping[str, Any] | None, actual: Mapping[str, Any]) -> float:
    """1.0 for equal argument dicts, else keys with equal values / |union of keys|.

    ``None`` (no reference) counts as a full match: there is nothing to compare.
    """
    if reference is None or dict(reference) == dict(actual):
        return 1.0
    keys = set(reference) | set(actual)
    equal = sum(
        1 for key in keys if key in reference and key in actual and reference[key] == actual[key]
    )
    return equal / len(keys)


def _names(calls: Sequence[ToolCall | ExpectedToolCall]) -> list[str]:
    return [call.name for call in calls]


def _pair_expected(
    case: EvalCase, expected: list[ExpectedToolCall], calls: list[ToolCall]
) -> dict[int, int]:
    """Expected index → actual index, by name, tie-broken by argument agreement."""
    if not expected or not calls:
        return {}
    similarity = np.array(
        [[argument_match(case.reference_for(e), c.arguments) for c in calls] for e in expected]
    ).reshape(len(expected), len(calls))
    return dict(assign_by_name(_names(expected), _names(calls), similarity))


def _in_expected_order(
    case: EvalCase, expected: list[ExpectedToolCall], calls: list[ToolCall]
) -> list[ToolCall]:
    """``calls`` with those made together (the parallel calls of one model step, one after
    another in the trace) put in the expected order among themselves: a model that asks
    for the weather and the time at once lists them in no meaningful order. The calls
    are paired with the expected ones as :func:`_pair_expected` pairs them."""
    if len(calls) < 2 or not expected or case.trace is None:
        return calls
    step_of = {
        id(call): index for index, step in enumerate(case.trace.steps()) for call in step.tool_calls
    }
    # a call of no step (one a tool made inside its own span) is a group of its own
    keyed = [(step_of.get(id(call), -1 - index), call) for index, call in enumerate(calls)]
    groups = [[call for _, call in run] for _, run in itertools.groupby(keyed, lambda kc: kc[0])]
    if len(groups) == len(calls):
        return calls
    paired = {actual: wanted for wanted, actual in _pair_expected(case, expected, calls).items()}
    position = {id(call): index for index, call in enumerate(calls)}
    return in_reference_order(groups, lambda call: paired.get(position[id(call)], len(expected)))


class _ExpectationMetric(Metric):
    """Base for metrics that compare the calls made with ``case.expected_tool_calls``."""

    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC
    default_threshold: ClassVar[float] = 0.7
    needs_expectations: ClassVar[bool] = True
    reads_steps: ClassVar[bool] = True
    reads_order: bool = False
    """Whether the score reads the order of the calls: those made together (the parallel
    calls of one model step) are then compared in the expected order among themselves."""

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        if case.expected_tool_calls is None:
            return Score.skip("no expectation: the case gives no expected_tool_calls")
        if case.trace is None:  # no run at all is not a run that called nothing
            return Score.failure(
                "invalid input: the case has no trace (give trace=, agent_trace= or a Trace)",
                error_kind=ErrorKind.INVALID_INPUT,
            )
        expected, calls = list(case.expected_tool_calls), case.tool_calls
        if self.reads_order:
            calls = _in_expected_order(case, expected, calls)
        return self.compare(case, expected, calls)

    def compare(
        self, case: EvalCase, expected: list[ExpectedToolCall], calls: list[ToolCall]
    ) -> Score:
        """The score of ``calls`` (those of the case's run, in order) against the
        ``expected`` ones; :meth:`compute` has checked that the case has both."""
        raise NotImplementedError


@register_metric
class ToolCallAccuracy(_ExpectationMetric):
    """Fraction of the expected tool calls the agent made (unordered, or in order by LCS;
    calls made together in one model step are in no order among themselves)."""

    name = "tool_call_accuracy"

    def __init__(
        self,
        *,
        require_order: bool = False,
        penalize_unexpected: bool = False,
        threshold: float | None = None,
    ) -> None:
        super().__init__(threshold=threshold)
        self.require_order = require_order
        self.reads_order = require_order
        self.penalize_unexpected = penalize_unexpected

    def compare(
        self, case: EvalCase, expected: list[ExpectedToolCall], calls: list[ToolCall]
    ) -> Score:
        want, got = _names(expected), _names(calls)
        matcher = lcs_length if self.require_order else multiset_overlap
        matched = matcher(want, got)
        metadata = {
            "expected": want,
            "called": got,
            "matched": matched,
            "require_order": self.require_order,
            "penalize_unexpected": self.penalize_unexpected,
        }
        if not want:
            value = 1.0 if not got else 0.0
            return Score(
                value, "no calls expected" + ("" if not got else f", {len(got)} made"), metadata
            )
        denominator = len(want) + len(got) - matched if self.penalize_unexpected else len(want)
        value = matched / denominator
        how = "in order" if self.require_order else "unordered"
        return Score(value, f"{matched} of {len(want)} expected calls matched ({how})", metadata)


@register_metric
class ToolSelectionF1(_ExpectationMetric):
    """F1 of the multiset of tool names called against the expected ones."""

    name = "tool_selection_f1"

    def compare(
        self, case: EvalCase, expected: list[ExpectedToolCall], calls: list[ToolCall]
    ) -> Score:
        want, got = _names(expected), _names(calls)
        overlap = multiset_overlap(want, got)
        precision = overlap / len(got) if got else (1.0 if not want else 0.0)
        recall = overlap / len(want) if want else (1.0 if not got else 0.0)
        total = len(want) + len(got)
        value = 2 * overlap / total if total else 1.0
        metadata = {"precision": precision, "recall": recall, "expected": want, "called": got}
        return Score(value, f"precision {precision:.3f}, recall {recall:.3f}", metadata)


@register_metric
class ToolRoutingAccuracy(_ExpectationMetric):
    """Fraction of expected steps where the call at that position used the expected tool
    (calls made together in one model step are in no order among themselves)."""

    name = "tool_routing_accuracy"
    reads_order = True

    def compare(
        self, case: EvalCase, expected: list[ExpectedToolCall], calls: list[ToolCall]
    ) -> Score:
        want, got = _names(expected), _names(calls)
        if not want:
            return Score(1.0, "no routing expected", {"expected": want, "called": got})
        wrong = [
            {"position": i, "expected": name, "called": got[i] if i < len(got) else None}
            for i, name in enumerate(want)
            if i >= len(got) or got[i] != name
        ]
        correct = len(want) - len(wrong)
        metadata = {"expected": want, "called": got, "misrouted": wrong}
        return Score(
            correct / len(want), f"{correct} of {len(want)} steps routed correctly", metadata
        )


@register_metric
class PlanOrder(_ExpectationMetric):
    """Expected tools found in the expected order: LCS of names / number expected (calls
    made together in one model step are in no order among themselves)."""

    name = "plan_order"
    reads_order = True

    def compare(
        self, case: EvalCase, expected: list[ExpectedToolCall], calls: list[ToolCall]
    ) -> Score:
        want, got = _names(expected), _names(calls)
        if not want:
            return Score(1.0, "no plan expected", {"expected": want, "called": got})
        matched = lcs_length(want, got)
        metadata = {"expected": want, "called": got, "in_order": matched}
        return Score(
            matched / len(want), f"{matched} of {len(want)} planned tools in order", metadata
        )


@dataclass(frozen=True)
class _CompiledSchema:
    """A tool schema made ready to check arguments against.

    ``is_valid`` is jsonschema-rs's compiled validator (~0.2 µs a call, against ~5 µs);
    ``validator`` (python-jsonschema) words the errors and has the last word: arguments the
    fast check refuses are checked again, so only its error messages are ever reported.
    """

    is_valid: Callable[[Any], bool]
    validator: Draft202012Validator


_VALIDATORS: dict[str, _CompiledSchema] = {}


def _compiled(schema: dict[str, Any]) -> _CompiledSchema:
    # Checking a schema costs far more than validating arguments, and tools keep their
    # schemas, so validators are kept by the schema's text (repr is cheap and stable for the
    # same parsed schema).
    key = repr(schema)
    compiled = _VALIDATORS.get(key)
    if compiled is None:
        Draft202012Validator.check_schema(schema)
        validator = Draft202012Validator(schema)
        try:  # offline: a schema never makes a metric fetch a remote $ref
            is_valid = jsonschema_rs.Draft202012Validator(schema, offline=True).is_valid
        except ValueError:  # e.g. a $ref or a pattern it cannot take: the full validator decides
            is_valid = validator.is_valid
        if len(_VALIDATORS) >= 256:
            _VALIDATORS.clear()
        compiled = _VALIDATORS[key] = _CompiledSchema(is_valid, validator)
    return compiled


def _schema_errors(tool: str, schema: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    try:
        compiled = _compiled(schema)
    except SchemaError as exc:
        raise MetricInputError(
            f"tool {tool!r} has an invalid JSON schema: {exc.message}; fix the tool's schema"
        ) from exc
    try:
        valid = compiled.is_valid(arguments)  # the common case, without building error objects
    except ValueError:  # a value JSON cannot hold (a date, bytes, a set): jsonschema decides
        valid = False
    if valid:
        return []
    errors = sorted(
        compiled.validator.iter_errors(arguments), key=lambda error: list(error.absolute_path)
    )
    return [f"{error.json_path}: {error.message}" for error in errors]


@register_metric
class ParameterCorrectness(_ExpectationMetric):
    """Tool arguments valid against the tool's JSON schema and equal to reference arguments.

    Each checked call scores 0 when its arguments break the schema, else its semantic score
    (reference keys with equal values / number of reference keys; 1.0 with no reference).
    An expected call with reference arguments that was never made scores 0. The score is the
    mean over checked calls.
    """

    name = "parameter_correctness"
    needs_expectations: ClassVar[bool] = False  # tool schemas are in the trace itself

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        return self.compare(case, list(case.expected_tool_calls or []), case.tool_calls)

    def compare(
        self, case: EvalCase, expected: list[ExpectedToolCall], calls: list[ToolCall]
    ) -> Score:
        pairs = {actual: want for want, actual in _pair_expected(case, expected, calls).items()}
        checked: list[dict[str, Any]] = []
        for index, call in enumerate(calls):
            schema = case.schema_for(call.name)
            reference = case.reference_for(expected[pairs[index]]) if index in pairs else None
            if schema is None and reference is None:
                continue
            errors = _schema_errors(call.name, schema, call.arguments) if schema is not None else []
            semantic = None
            if reference is not None:
                matches = sum(
                    1 for k, v in reference.items() if call.arguments.get(k, _MISSING) == v
                )
                semantic = matches / len(reference) if reference else 1.0
            score = 0.0 if errors else (1.0 if semantic is None else semantic)
            checked.append(
                {
                    "index": index,
                    "tool": call.name,
                    "schema_checked": schema is not None,
                    "schema_valid": not errors,
                    "schema_errors": errors,
                    "semantic_score": semantic,
                    "score": score,
                }
            )
        made = set(pairs.values())
        for want_index, want in enumerate(expected):
            if want_index not in made and case.reference_for(want) is not None:
                checked.append({"tool": want.name, "missing": True, "score": 0.0})
        if not checked:
            return Score.skip("nothing to check: no tool schemas or reference arguments apply")
        value = sum(item["score"] for item in checked) / len(checked)
        invalid = sum(1 for item in checked if not item.get("schema_valid", True))
        reason = f"{len(checked)} calls checked, {invalid} with schema errors"
        return Score(value, reason, {"calls": checked})


@register_metric
class EndState(Metric):
    """Fraction of expected end-state fields that the actual end state matches."""

    name = "end_state"
    reads_end: ClassVar[bool] = True
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC
    needs_expectations: ClassVar[bool] = True
    default_threshold: ClassVar[float] = 1.0

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        if case.expected_state is None:
            return Score.skip("no expectation: the case gives no expected_state")
        if case.actual_state is None:
            return Score(0.0, "no actual_state recorded", {"mismatches": {}})
        expected = case.expected_state
        mismatches = {
            key: {"expected": value, "actual": case.actual_state.get(key)}
            for key, value in expected.items()
            if case.actual_state.get(key, _MISSING) != value
        }
        if not expected:
            return Score(1.0, "no fields expected", {"mismatches": {}})
        matched = len(expected) - len(mismatches)
        return Score(
            matched / len(expected),
            f"{matched} of {len(expected)} end-state fields as expected",
            {"mismatches": mismatches},
        )


@register_metric
class StepRatio(Metric):
    """Minimum steps the task needs / steps taken (tool calls by default), at most 1."""

    name = "step_ratio"
    reads_steps: ClassVar[bool] = True
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC
    needs_expectations: ClassVar[bool] = True
    default_threshold: ClassVar[float] = 0.5

    def __init__(self, *, count: str = "tool_calls", threshold: float | None = None) -> None:
        super().__init__(threshold=threshold)
        if count not in ("tool_calls", "steps"):
            raise MetricInputError(
                f"step_ratio: count must be 'tool_calls' or 'steps', got {count!r}"
            )
        self.count = count

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        if case.minimum_steps is None:
            return Score.skip("no expectation: the case gives no minimum_steps")
        if case.minimum_steps < 0:
            raise MetricInputError(f"minimum_steps must be >= 0, got {case.minimum_steps}")
        actual = len(case.tool_calls) if self.count == "tool_calls" else len(case.steps)
        metadata = {
            "minimum_steps": case.minimum_steps,
            "actual_steps": actual,
            "count": self.count,
        }
        if actual == 0:
            value = 1.0 if case.minimum_steps == 0 else 0.0
        else:
            value = min(1.0, case.minimum_steps / actual)
        return Score(value, f"{case.minimum_steps} needed, {actual} taken", metadata)


_ASPECTS = ("selection", "parameters", "sequence", "utilization")


def _selection(used: set[str], expected: set[str]) -> float:
    if used == expected:
        return 1.0
    if used < expected:
        return len(used) / len(expected)
    if expected < used:
        return len(expected) / len(used)
    return len(used & expected) / len(used | expected)


def _uses_results(answer: Any, calls: list[ToolCall]) -> float | None:
    """1.0 if the answer shares a content word with a successful result, 0.0 if not, None if
    no call returned anything to use."""
    results = [
        content_tokens(text_of(c.result)) for c in calls if not c.failed and c.result is not None
    ]
    results = [tokens for tokens in results if tokens]
    if not results:
        return None
    answer_tokens = content_tokens(text_of(answer))
    return 1.0 if any(tokens & answer_tokens for tokens in results) else 0.0


@register_metric
class ReferenceToolCorrectness(_ExpectationMetric):
    """Gaussia's four weighted aspects: selection, parameters, sequence, result utilization."""

    name = "reference_tool_correctness"
    default_threshold: ClassVar[float] = 1.0

    def __init__(
        self,
        *,
        weights: Mapping[str, float] | None = None,
        order_matters: bool = True,
        check_utilization: bool = True,
        threshold: float | None = None,
    ) -> None:
        super().__init__(threshold=threshold)
        merged = {aspect: 0.25 for aspect in _ASPECTS} | dict(weights or {})
        unknown = set(merged) - set(_ASPECTS)
        if unknown:
            raise MetricInputError(
                f"reference_tool_correctness: unknown weight(s) {sorted(unknown)}; use {list(_ASPECTS)}"
            )
        if any(w < 0 or not math.isfinite(w) for w in merged.values()) or not math.isclose(
            sum(merged.values()), 1.0, abs_tol=1e-9
        ):
            raise MetricInputError(
                f"reference_tool_correctness: weights must be >= 0 and sum to 1, got {merged}"
            )
        self.weights = merged
        self.order_matters = order_matters
        self.reads_order = order_matters
        self.check_utilization = check_utilization

    def compare(
        self, case: EvalCase, expected: list[ExpectedToolCall], calls: list[ToolCall]
    ) -> Score:
        want, got = _names(expected), _names(calls)
        if not want and not got:
            aspects = dict.fromkeys(_ASPECTS, 1.0)
            return Score(1.0, "no tools expected and none used", {"aspects": aspects})
        if want and not got:
            aspects = dict.fromkeys(_ASPECTS, 0.0)
            return Score(0.0, "tools were expected but none was used", {"aspects": aspects})
        if not want:  # every call is unexpected: no selection, parameter or order is right
            used = 1.0 if not self.check_utilization else _uses_results(case.actual_output, calls)
            aspects = {
                "selection": 0.0,
                "parameters": 0.0,
                "sequence": 0.0,
                "utilization": 1.0 if used is None else used,
            }
            return Score(
                sum(self.weights[a] * aspects[a] for a in _ASPECTS),
                f"no tools were expected but {len(calls)} call(s) were made",
                {"aspects": aspects, "weights": self.weights},
            )
        pairs = _pair_expected(case, expected, calls)
        parameters = (
            sum(
                argument_match(case.reference_for(e), calls[pairs[i]].arguments)
                if i in pairs
                else 0.0
                for i, e in enumerate(expected)
            )
            / len(expected)
            if expected
            else 1.0
        )
        sequence = 1.0 if not self.order_matters or not want else lcs_length(want, got) / len(want)
        utilization: float | None = 1.0
        if self.check_utilization:
            utilization = _uses_results(case.actual_output, calls)
        aspects = {
            "selection": _selection(set(got), set(want)),
            "parameters": parameters,
            "sequence": sequence,
            "utilization": 1.0 if utilization is None else utilization,
        }
        value = sum(self.weights[a] * aspects[a] for a in _ASPECTS)
        metadata: dict[str, Any] = {"aspects": aspects, "weights": self.weights}
        if utilization is None:
            metadata["note"] = "no tool returned a usable result; utilization counted as 1.0"
        low = [a for a in _ASPECTS if aspects[a] < 1.0]
        reason = "all aspects correct" if not low else "imperfect: " + ", ".join(low)
        return Score(value, reason, metadata)
