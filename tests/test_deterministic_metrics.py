"""Deterministic metrics, checked against values worked out by hand from the definitions."""

from __future__ import annotations

from datetime import date
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from agenteval_core import (
    AgentStep,
    EvalCase,
    ExpectedToolCall,
    MetricInputError,
    ToolCall,
    ToolSpec,
    Trace,
    create_metric,
)
from agenteval_core.metrics import (
    ParameterCorrectness,
    ReferenceToolCorrectness,
    ToolCallAccuracy,
    ToolSelectionF1,
)


def case_with(
    calls: list[ToolCall | str], expected: list[Any] | None = None, **fields: Any
) -> EvalCase:
    """A case whose run made ``calls`` one after another, each asked for by a model step of
    its own, then answered."""
    steps = [AgentStep(tool_calls=[ToolCall(name=c) if isinstance(c, str) else c]) for c in calls]
    return EvalCase(
        input="task",
        agent_trace=[*steps, AgentStep(output=fields.pop("output", "done"))],
        expected_tool_calls=expected,
        **fields,
    )


def score(name: str, case: EvalCase, **options: Any) -> float | None:
    return create_metric(name, **options).measure(case).score


# --- tool_call_accuracy ------------------------------------------------------------------


def test_seed_002_example_all_expected_tools_called() -> None:
    case = EvalCase(
        input="Search for recent AI papers and write a summary",
        agent_trace=[
            AgentStep(tool_calls=[ToolCall(name="search", arguments={"query": "AI papers 2025"})]),
            AgentStep(tool_calls=[ToolCall(name="summarize")], output="Here are..."),
        ],
        expected_tool_calls=["search", "summarize"],
    )
    result = ToolCallAccuracy().measure(case)
    assert result.score == 1.0 and result.success and result.threshold == 0.7


def test_half_of_expected_tools_called_scores_half() -> None:
    assert score("tool_call_accuracy", case_with(["search"], ["search", "summarize"])) == 0.5


def test_unordered_matching_keeps_multiplicity() -> None:
    # expected search twice, called once: 1 matched of 2 expected
    assert score("tool_call_accuracy", case_with(["search"], ["search", "search"])) == 0.5


def test_ordered_uses_lcs_not_positional_zip() -> None:
    # expected [search, summarize], called [search, search, summarize]:
    # LCS = [search, summarize] = 2 → 2/2 = 1.0 (a positional zip would give 0.5)
    case = case_with(["search", "search", "summarize"], ["search", "summarize"])
    assert score("tool_call_accuracy", case, require_order=True) == 1.0
    # reversed order: LCS of [a, b] and [b, a] is 1 → 0.5
    assert score("tool_call_accuracy", case_with(["b", "a"], ["a", "b"]), require_order=True) == 0.5


ORDER_METRICS = {
    "tool_routing_accuracy": {},
    "plan_order": {},
    "tool_call_accuracy": {"require_order": True},
    "reference_tool_correctness": {},
}


def order_scores(steps: list[list[str]], expected: list[str]) -> dict[str, float | None]:
    """What the metrics that read the calls' order give a run whose model steps asked for
    ``steps`` (each the names of the calls one step asked for together); for
    reference_tool_correctness, its sequence aspect."""
    case = EvalCase(
        input="Weather and time in Paris?",
        agent_trace=[
            *(AgentStep(tool_calls=[ToolCall(name=name) for name in step]) for step in steps),
            AgentStep(output="Sunny, 10:00."),
        ],
        expected_tool_calls=expected,
    )
    results = {
        name: create_metric(name, **options).measure(case)
        for name, options in ORDER_METRICS.items()
    }
    scores = {name: result.score for name, result in results.items()}
    scores["reference_tool_correctness"] = results["reference_tool_correctness"].metadata[
        "aspects"
    ]["sequence"]
    return scores


def test_calls_made_together_are_in_no_order_among_themselves() -> None:
    # a model that asks for the weather and the time at once lists them in no meaningful
    # order (and the framework runs them at once): expected [get_weather, get_time], asked
    # for together as [get_time, get_weather], routing was 0 of 2, plan_order, the ordered
    # accuracy and the sequence aspect LCS 1 / 2
    expected = ["get_weather", "get_time"]
    assert order_scores([["get_time", "get_weather"]], expected) == dict.fromkeys(
        ORDER_METRICS, 1.0
    )
    # one after another, each in a model step of its own, they are out of order
    assert order_scores([["get_time"], ["get_weather"]], expected) == {
        "tool_routing_accuracy": 0.0,
        "plan_order": 0.5,
        "tool_call_accuracy": 0.5,
        "reference_tool_correctness": 0.5,
    }
    # a step's calls are put in order among themselves, never before an earlier step's:
    # expected [search, get_weather, get_time], asked [get_time, get_weather] then [search]
    # compare as [get_weather, get_time, search]: no position right, LCS 2 of 3
    assert order_scores([["get_time", "get_weather"], ["search"]], ["search", *expected]) == {
        "tool_routing_accuracy": 0.0,
        "plan_order": pytest.approx(2 / 3),
        "tool_call_accuracy": pytest.approx(2 / 3),
        "reference_tool_correctness": pytest.approx(2 / 3),
    }


def test_penalize_unexpected_divides_by_union() -> None:
    # expected [a, b], called [a, c, d]: matched 1, union size 2 + 3 - 1 = 4 → 0.25
    case = case_with(["a", "c", "d"], ["a", "b"])
    assert score("tool_call_accuracy", case, penalize_unexpected=True) == 0.25
    assert score("tool_call_accuracy", case) == 0.5


def test_no_expectation_is_skipped_and_empty_expectation_is_strict() -> None:
    result = ToolCallAccuracy().measure(case_with(["a"], None))
    assert result.score is None and result.skipped and "no expectation" in result.reason
    assert result.status == "skipped"
    assert score("tool_call_accuracy", case_with([], [])) == 1.0
    assert score("tool_call_accuracy", case_with(["a"], [])) == 0.0


# --- tool_selection_f1, routing, plan order -------------------------------------------------


def test_selection_f1_over_multisets() -> None:
    # expected [a, a, b], called [a, c]: overlap 1, precision 1/2, recall 1/3, F1 = 2*1/(3+2) = 0.4
    result = ToolSelectionF1().measure(case_with(["a", "c"], ["a", "a", "b"]))
    assert result.score == pytest.approx(0.4)
    assert result.metadata["precision"] == 0.5
    assert result.metadata["recall"] == pytest.approx(1 / 3)
    assert score("tool_selection_f1", case_with([], [])) == 1.0
    assert score("tool_selection_f1", case_with([], ["a"])) == 0.0


def test_routing_accuracy_is_positional() -> None:
    # expected [get, send, log], called [get, log]: position 0 ok, 1 wrong (log), 2 missing → 1/3
    result = create_metric("tool_routing_accuracy").measure(
        case_with(["get", "log"], ["get", "send", "log"])
    )
    assert result.score == pytest.approx(1 / 3)
    assert [m["position"] for m in result.metadata["misrouted"]] == [1, 2]
    assert (
        score("tool_routing_accuracy", case_with(["x"], [])) == 1.0
    )  # seed 004: no expectation → 1.0


def test_plan_order_does_not_let_one_missing_tool_consume_the_plan() -> None:
    # expected [finalize, get, send], called [get, send]: seed 004's loop scans past the end looking
    # for finalize and then finds nothing (0/3); LCS finds [get, send] → 2/3.
    assert score(
        "plan_order", case_with(["get", "send"], ["finalize", "get", "send"])
    ) == pytest.approx(2 / 3)


# --- parameter_correctness -----------------------------------------------------------------

INVOICE_SCHEMA = {
    "type": "object",
    "properties": {
        "invoice_id": {"type": "string"},
        "channel": {"type": "string", "enum": ["email", "post"]},
        "options": {
            "type": "object",
            "properties": {"copies": {"type": "integer"}},
            "required": ["copies"],
        },
    },
    "required": ["invoice_id"],
}


def schema_case(arguments: dict[str, Any], expected: list[Any] | None = None) -> EvalCase:
    trace = Trace.from_steps(
        "Send invoice inv_01",
        [AgentStep(tool_calls=[ToolCall(name="send_invoice", arguments=arguments)])],
        tools=[ToolSpec(name="send_invoice", parameters=INVOICE_SCHEMA)],
    )
    return EvalCase(trace=trace, expected_tool_calls=expected)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "$: 'invoice_id' is a required property"),
        ({"invoice_id": 1}, "$.invoice_id: 1 is not of type 'string'"),
        (
            {"invoice_id": "inv_01", "channel": "fax"},
            "$.channel: 'fax' is not one of ['email', 'post']",
        ),
        ({"invoice_id": "inv_01", "options": {}}, "$.options: 'copies' is a required property"),
        (
            {"invoice_id": "inv_01", "options": {"copies": "2"}},
            "$.options.copies: '2' is not of type 'integer'",
        ),
    ],
)
def test_schema_errors_are_reported_with_their_path(
    arguments: dict[str, Any], message: str
) -> None:
    result = ParameterCorrectness().measure(schema_case(arguments))
    assert result.score == 0.0
    assert result.metadata["calls"][0]["schema_errors"] == [message]


# tool schemas as frameworks write them, and some keywords of 2020-12 proper
_TOOL_SCHEMAS = [
    INVOICE_SCHEMA,
    {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "pattern": "^[a-z ]+$"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
            "ratio": {"type": "number", "exclusiveMaximum": 1},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "mode": {"enum": ["fast", "exact", None]},
            "point": {"$ref": "#/$defs/point"},
        },
        "required": ["query"],
        "additionalProperties": False,
        "$defs": {
            "point": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"],
            }
        },
    },
    {
        "type": "object",
        "properties": {"pair": {"type": "array", "prefixItems": [{"type": "string"}, {}]}},
        "dependentRequired": {"pair": ["query"]},
        "anyOf": [{"required": ["query"]}, {"required": ["pair"]}],
    },
]
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=60)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.sampled_from(["", "inv_01", "fast", "exact", "email", "post", "a b", "A1", "2"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "invoice_id",
                    "channel",
                    "options",
                    "copies",
                    "query",
                    "limit",
                    "ratio",
                    "tags",
                    "mode",
                    "point",
                    "x",
                    "y",
                    "pair",
                    "other",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=8,
)


@settings(max_examples=400)
@given(st.sampled_from(range(len(_TOOL_SCHEMAS))), _JSON)
def test_the_compiled_check_agrees_with_jsonschema(which: int, arguments: Any) -> None:
    schema = _TOOL_SCHEMAS[which]
    fast = jsonschema_rs.Draft202012Validator(schema, offline=True)
    assert fast.is_valid(arguments) == Draft202012Validator(schema).is_valid(arguments)


def test_a_schema_the_compiled_check_cannot_take_is_checked_by_jsonschema() -> None:
    # a named backreference is Python regex syntax that jsonschema-rs refuses; each call
    # still gets its verdict and message
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "(?P<x>a)(?P=x)"}},
    }
    with pytest.raises(ValueError, match="is not a"):
        jsonschema_rs.Draft202012Validator(schema, offline=True)
    trace = Trace.from_steps(
        "x",
        [
            AgentStep(tool_calls=[ToolCall(name="t", arguments={"code": "aa"})]),
            AgentStep(tool_calls=[ToolCall(name="t", arguments={"code": "ab"})]),
        ],
        tools=[ToolSpec(name="t", parameters=schema)],
    )
    calls = ParameterCorrectness().measure(trace).metadata["calls"]
    assert [c["schema_errors"] for c in calls] == [
        [],
        ["$.code: 'ab' does not match '(?P<x>a)(?P=x)'"],
    ]


def test_arguments_json_cannot_hold_are_checked_by_jsonschema() -> None:
    # online, a framework may hand a tool Python values (a date, bytes) that the compiled
    # check refuses to read; jsonschema still judges them by the schema
    schema = {
        "type": "object",
        "properties": {"day": {"type": "string"}, "blob": {}},
        "required": ["day"],
    }
    trace = Trace.from_steps(
        "x",
        [
            AgentStep(
                tool_calls=[ToolCall(name="t", arguments={"day": "2026-11-23", "blob": b"x"})]
            ),
            AgentStep(tool_calls=[ToolCall(name="t", arguments={"day": date(2026, 11, 23)})]),
        ],
        tools=[ToolSpec(name="t", parameters=schema)],
    )
    result = ParameterCorrectness().measure(trace)
    assert [c["schema_errors"] for c in result.metadata["calls"]] == [
        [],
        ["$.day: datetime.date(2026, 11, 23) is not of type 'string'"],
    ]
    assert result.score == 0.5


def test_semantic_match_against_reference_arguments() -> None:
    # valid call; reference {invoice_id: inv_01, channel: email}; call has the id but channel post → 1/2
    case = schema_case(
        {"invoice_id": "inv_01", "channel": "post"},
        [
            ExpectedToolCall(
                name="send_invoice", arguments={"invoice_id": "inv_01", "channel": "email"}
            )
        ],
    )
    result = ParameterCorrectness().measure(case)
    assert result.score == 0.5
    assert result.metadata["calls"][0]["semantic_score"] == 0.5


def test_missing_expected_call_with_reference_scores_zero() -> None:
    # one valid call (1.0) + one expected call never made (0.0) → mean 0.5
    case = schema_case(
        {"invoice_id": "inv_01"},
        [
            ExpectedToolCall(name="send_invoice"),
            ExpectedToolCall(name="archive", arguments={"invoice_id": "inv_01"}),
        ],
    )
    assert ParameterCorrectness().measure(case).score == 0.5


def test_nothing_to_check_is_skipped_and_bad_schema_is_an_input_error() -> None:
    assert ParameterCorrectness().measure(case_with(["a"], None)).skipped
    trace = Trace.from_steps(
        "x",
        [AgentStep(tool_calls=[ToolCall(name="t")])],
        tools=[ToolSpec(name="t", parameters={"type": "nonsense"})],
    )
    result = ParameterCorrectness().measure(trace)
    assert result.score is None and "invalid JSON schema" in (result.error or "")


# --- end_state, step_ratio ---------------------------------------------------------------------


def test_end_state_fraction_and_mismatches() -> None:
    case = case_with(
        [],
        expected_state={"status": "sent", "copies": 1},
        actual_state={"status": "draft", "copies": 1},
    )
    result = create_metric("end_state").measure(case)
    assert result.score == 0.5 and result.success is False  # default threshold 1.0
    assert result.metadata["mismatches"] == {"status": {"expected": "sent", "actual": "draft"}}
    assert create_metric("end_state").measure(case_with([])).skipped
    assert score("end_state", case_with([], expected_state={"a": 1})) == 0.0


def test_step_ratio() -> None:
    # minimum 2, took 4 tool calls → 0.5
    assert score("step_ratio", case_with(["a", "b", "a", "b"], minimum_steps=2)) == 0.5
    assert score("step_ratio", case_with(["a"], minimum_steps=2)) == 1.0  # capped
    assert score("step_ratio", case_with([], minimum_steps=2)) == 0.0  # seed: 0 steps → 0.0
    assert create_metric("step_ratio").measure(case_with(["a"])).skipped


# --- reference_tool_correctness (seed 003 aspects) ---------------------------------------------


def test_reference_tool_correctness_aspects() -> None:
    # expected [search(q=AI), summarize]; used [summarize, search(q=ML)], answer mentions "Paper".
    # selection: U == E → 1; parameters: search {q:AI} vs {q:ML} → 0/1 keys equal → 0,
    # summarize no reference → 1 → mean 0.5; sequence: LCS([search, summarize], [summarize, search])
    # = 1 → 0.5; utilization: result "Paper Alpha" shares "paper" with the answer → 1.
    # score = 0.25 * (1 + 0.5 + 0.5 + 1) = 0.75
    case = case_with(
        [
            ToolCall(name="summarize"),
            ToolCall(name="search", arguments={"q": "ML"}, result="Paper Alpha"),
        ],
        [ExpectedToolCall(name="search", arguments={"q": "AI"}), "summarize"],
        output="Found one paper.",
    )
    result = ReferenceToolCorrectness().measure(case)
    assert result.metadata["aspects"] == {
        "selection": 1.0,
        "parameters": 0.5,
        "sequence": 0.5,
        "utilization": 1.0,
    }
    assert result.score == pytest.approx(0.75)
    assert result.success is False  # default tool_threshold 1.0


def test_reference_tool_correctness_selection_cases() -> None:
    # U ⊂ E: used {a}, expected {a, b} → 1/2; E ⊂ U: used {a, b, c}, expected {a} → 1/3;
    # neither: used {a, c}, expected {a, b} → |{a}| / |{a, b, c}| = 1/3
    def selection(used: list[str], expected: list[str]) -> float:
        result = ReferenceToolCorrectness(check_utilization=False).measure(
            case_with(used, expected)
        )
        return float(result.metadata["aspects"]["selection"])

    assert selection(["a"], ["a", "b"]) == 0.5
    assert selection(["a", "b", "c"], ["a"]) == pytest.approx(1 / 3)
    assert selection(["a", "c"], ["a", "b"]) == pytest.approx(1 / 3)


def test_an_answer_in_chinese_uses_the_result_it_repeats() -> None:
    # Chinese puts no space between words: the result "订单已发货" ("order shipped") and the
    # answer "您的订单已发货，预计周五到达。" were one "word" each (and the answer's clause a
    # longer one), so the answer that repeats the result shared no word with it:
    # utilization 0. Their character pairs share 订单, 单已, 已发 and 发货
    lookup = ToolCall(name="lookup", result="订单已发货")
    case = case_with([lookup], ["lookup"], output="您的订单已发货，预计周五到达。")
    assert ReferenceToolCorrectness().measure(case).metadata["aspects"]["utilization"] == 1.0
    elsewhere = case_with([lookup], ["lookup"], output="请稍后再试。")  # "try again later"
    assert ReferenceToolCorrectness().measure(elsewhere).metadata["aspects"]["utilization"] == 0.0


def test_reference_tool_correctness_edge_cases_and_weights() -> None:
    none_used = ReferenceToolCorrectness().measure(case_with([], ["a"]))
    assert none_used.score == 0.0 and set(none_used.metadata["aspects"].values()) == {0.0}
    assert ReferenceToolCorrectness().measure(case_with([], [])).score == 1.0
    # nothing expected, a tool used (its result unused: utilization counts as 1): as Gaussia,
    # only utilization holds, 0.25 × 1
    unexpected = ReferenceToolCorrectness().measure(case_with(["a"], []))
    assert (unexpected.score, unexpected.metadata["aspects"]) == (
        0.25,
        {"selection": 0.0, "parameters": 0.0, "sequence": 0.0, "utilization": 1.0},
    )
    assert unexpected.reason == "no tools were expected but 1 call(s) were made"
    weighted = ReferenceToolCorrectness(
        weights={"selection": 1.0, "parameters": 0.0, "sequence": 0.0, "utilization": 0.0}
    )
    assert weighted.measure(case_with(["a"], ["a", "b"])).score == 0.5
    with pytest.raises(MetricInputError, match="sum to 1"):
        ReferenceToolCorrectness(weights={"selection": 0.5})
    with pytest.raises(MetricInputError, match="unknown weight"):
        ReferenceToolCorrectness(weights={"speed": 0.0})


# --- properties ---------------------------------------------------------------------------------

names = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=8)
METRICS = [
    "tool_call_accuracy",
    "tool_selection_f1",
    "tool_routing_accuracy",
    "plan_order",
    "reference_tool_correctness",
]


@given(expected=names, called=names)
def test_scores_stay_in_unit_interval(expected: list[str], called: list[str]) -> None:
    case = case_with(list(called), list(expected))
    for name in METRICS:
        value = score(name, case)
        assert value is not None and 0.0 <= value <= 1.0


@given(expected=names, called=names, data=st.data())
def test_unordered_matching_ignores_list_order(
    expected: list[str], called: list[str], data: st.DataObject
) -> None:
    shuffled_expected = data.draw(st.permutations(expected))
    shuffled_called = data.draw(st.permutations(called))
    original = score("tool_call_accuracy", case_with(list(called), list(expected)))
    shuffled = score(
        "tool_call_accuracy", case_with(list(shuffled_called), list(shuffled_expected))
    )
    assert original == shuffled


@given(expected=names.filter(bool), called=names)
def test_ordered_never_exceeds_unordered(expected: list[str], called: list[str]) -> None:
    case = case_with(list(called), list(expected))
    ordered = score("tool_call_accuracy", case, require_order=True)
    unordered = score("tool_call_accuracy", case)
    assert ordered is not None and unordered is not None and ordered <= unordered


@given(a=names, b=names)
def test_selection_f1_is_symmetric(a: list[str], b: list[str]) -> None:
    assert score("tool_selection_f1", case_with(list(b), list(a))) == pytest.approx(
        score("tool_selection_f1", case_with(list(a), list(b)))
    )
