"""Regression cases: captured failures turned into cases a suite runs in CI.

A cases file is JSON Lines, one :class:`RegressionCase` a line, versioned by its
``agenteval_case`` field. :func:`cases_from_capture` selects the failures of a capture (runs
that did not complete, loop alerts, failed metrics), merges the ones with the same input and
the same way of failing into one case with a count, and writes for each the code-based
checks its failure calls for. The file is meant to be edited: add ``expected_tool_calls``,
``expected_state`` or a reference answer, and the suite checks them too.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .._errors import CaptureError, MetricInputError, UnknownMetricError, describe_validation
from .._text import says_nothing_alone
from ..engine._sinks import CallbackSink
from ..metrics._loops import canonical_call, identity_arguments
from ..metrics._protocol import Metric, SessionMetric
from ..metrics._registry import metric_class
from ..schema._capture import runs_with_turns
from ..schema._results import MetricResult, TraceResults, failing, flagged_traces, repeats
from ..schema._trace import (
    GUARD_REFUSED,
    HUMAN_ANSWERS,
    RESUME,
    RESUME_QUESTIONS,
    RESUMES_TRACE_ID,
    TOOL_NOT_RUN,
    EvalCase,
    ExpectedToolCall,
    LatestKept,
    RunStatus,
    ToolCallLimit,
    Trace,
    answers_by_question,
    known_version,
    last_answer,
    resume_by_question,
    text_of,
)

__all__ = [
    "CASES_VERSION",
    "DEFAULT_MAX_TURNS",
    "CaseProvenance",
    "FailedMetric",
    "RegressionCase",
    "Selection",
    "cases_from_capture",
    "read_cases",
    "write_cases",
]

CASES_VERSION = 1
"""Version of the cases file format (each line's ``agenteval_case`` field); a reader refuses
lines from a newer version."""

Selection = Literal["incomplete", "refusals", "alerts", "metrics"]
"""Which failures become cases: ``incomplete`` (runs that ended in error, were stopped,
cancelled, timed out or hit a limit), ``refusals`` (runs whose answer was the model
provider's refusal), ``alerts`` (runs that raised a loop alert), ``metrics`` (runs that
failed a metric, or that a failing session metric flagged)."""

ALL_SELECTIONS: tuple[Selection, ...] = ("incomplete", "refusals", "alerts", "metrics")

BASE_CHECKS = ("tool_failures",)
"""Checks every regression case makes: the run's tools must work (and, by the suite's own
rule, the run must complete)."""


class FailedMetric(BaseModel):
    """A metric a captured run failed."""

    model_config = ConfigDict(extra="forbid")

    name: str
    score: float | None = None
    threshold: float | None = None
    reason: str = ""


class CaseProvenance(BaseModel):
    """Where a regression case came from: the captured failure it reproduces."""

    model_config = ConfigDict(extra="forbid")

    capture: str | None = None
    """The capture file the failure was found in."""
    trace_ids: list[str] = Field(default_factory=list)
    """Every captured trace that failed this way with this input, oldest first."""
    session_id: str | None = None
    """The session of the first of them."""
    time: str | None = None
    """When the first of them started (ISO 8601, UTC)."""
    status: str | None = None
    """How the run ended."""
    status_reason: str | None = None
    failing_metrics: list[FailedMetric] = Field(default_factory=list)
    alerts: list[str] = Field(default_factory=list)
    """The loop alerts the run raised (``pattern: message``)."""
    failed_tools: list[str] = Field(default_factory=list)
    """Tools whose calls failed in the run."""
    refusal: str | None = None
    """The provider's refusal the run answered with (``""`` when it gave no text)."""
    reference_trace_id: str | None = None
    """A later trace with the same input that passed, whose trajectory is the reference."""
    turns_left_out: int = 0
    """Earlier turns of the session not kept in the case's ``conversation``, which keeps
    the most recent (``max_turns`` of :func:`cases_from_capture`)."""


class RegressionCase(BaseModel):
    """One line of a cases file: an input that failed once, what must hold when it is run
    again, and where it came from.

    Every field but ``id`` and ``input`` may be edited or left out. ``metrics`` names the
    checks a suite runs on the case (registry names); ``expected_tool_calls`` (with
    ``trajectory_match``), ``expected_state`` (``end_state``), ``expected_output``,
    ``tools_must_succeed`` and ``tool_call_limits`` (``tool_constraints``) are what they check.
    """

    model_config = ConfigDict(extra="forbid")

    agenteval_case: int = CASES_VERSION
    """The format version this line was written in."""
    id: str
    input: Any = None
    conversation: list[dict[str, Any]] | None = None
    """The earlier turns of the conversation, oldest first (``{"input", "output"}`` each)."""
    resume: list[Any] | None = None
    """The answers a human gave the run each time it paused for one, in order (see
    :attr:`EvalCase.resume`); interrupts answered at once by id are given by question
    (:func:`agenteval_core.answers_by_question`)."""
    metrics: list[str] = Field(default_factory=list)
    expected_tool_calls: list[ExpectedToolCall] | None = None
    expected_state: dict[str, Any] | None = None
    expected_output: Any = None
    tools_must_succeed: list[str] | None = None
    tool_call_limits: list[ToolCallLimit] | None = None
    allow_refusal: bool = False
    """Whether the model may refuse this input (see :attr:`EvalCase.allow_refusal`)."""
    count: int = 1
    """How many captured runs failed this way with this input."""
    provenance: CaseProvenance = Field(default_factory=CaseProvenance)

    @field_validator("agenteval_case")
    @classmethod
    def _known_version(cls, value: int) -> int:
        return known_version(value, CASES_VERSION, "cases format")

    @field_validator("resume")
    @classmethod
    def _readable_answers(cls, value: list[Any] | None) -> list[Any] | None:
        for answer in value or ():
            answers_by_question(answer)  # one given by question is well formed
        return value

    def to_eval_case(self) -> EvalCase:
        """The case a suite runs: its checks as ``metrics``, its provenance and count in
        ``metadata``."""
        return EvalCase(
            id=self.id,
            input=self.input,
            conversation=self.conversation,
            resume=self.resume,
            metrics=list(self.metrics),
            expected_tool_calls=self.expected_tool_calls,
            expected_state=self.expected_state,
            expected_output=self.expected_output,
            tools_must_succeed=self.tools_must_succeed,
            tool_call_limits=self.tool_call_limits,
            allow_refusal=self.allow_refusal,
            metadata={"count": self.count, "provenance": self.provenance.model_dump(mode="json")},
        )


def write_cases(cases: Iterable[RegressionCase], path: str | os.PathLike[str]) -> int:
    """Write cases as JSON Lines (replacing the file); returns how many were written."""
    lines = [case.model_dump_json(exclude_none=True) + "\n" for case in cases]
    Path(path).write_text("".join(lines), encoding="utf-8")
    return len(lines)


def read_cases(path: str | os.PathLike[str]) -> list[EvalCase]:
    """Read a cases file into the cases a suite runs.

    Raises:
        CaptureError: the file is missing, or a line is not a case (file, line and field
            named), or two lines share an id.
    """
    source = Path(path)
    if not source.is_file():
        raise CaptureError(
            f"{path}: no such cases file; write one with `agenteval cases CAPTURE -o {path}`"
        )
    cases: list[EvalCase] = []
    seen: dict[str, int] = {}
    with open(source, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                case = RegressionCase.model_validate_json(line)
            except ValidationError as exc:
                raise CaptureError(f"{path}:{number}: {describe_validation(exc)}") from None
            if case.id in seen:
                raise CaptureError(
                    f"{path}:{number}: case id {case.id!r} is also on line {seen[case.id]}; "
                    "give each case its own id"
                )
            seen[case.id] = number
            cases.append(case.to_eval_case())
    if not cases:
        raise CaptureError(f"{path}: no cases in the file")
    return cases


@dataclass
class _Scored:
    """What a replay found about the traces that failed."""

    failing: dict[str, list[MetricResult]] = field(default_factory=dict)
    flagged: dict[str, list[MetricResult]] = field(default_factory=dict)


def _replayed(
    capture: str | os.PathLike[str],
    metrics: Sequence[str | Metric | SessionMetric] | None,
    judge: Any,
) -> _Scored:
    from ..offline._processes import replay

    scored = _Scored()

    def on_trace(trace: Trace, results: TraceResults) -> None:
        failed = failing(results.results)
        if failed:  # only failures are kept: a capture may hold millions of traces
            scored.failing[trace.id] = failed

    def on_session(session_id: str, results: list[MetricResult]) -> None:
        _add_flagged(scored, results)

    replay(capture, metrics, judge=judge, sinks=[CallbackSink(on_trace, on_session=on_session)])
    return scored


def _add_flagged(scored: _Scored, session_results: Iterable[MetricResult]) -> None:
    """Traces a failing session metric flagged (``flagged_traces``) count as failing it."""
    for result in failing(session_results):
        for trace_id in flagged_traces([result]):
            scored.flagged.setdefault(trace_id, []).append(result)


def _from_results(path: str | os.PathLike[str]) -> _Scored:
    from ..report._report import read_results, results_read

    scored, sessions = _Scored(), 0
    torn: list[str] = []
    for line in read_results(path, torn):  # every line as it streams: no trace is left out
        if line.trace_id is not None and line.results is not None:
            if repeats(line.results):  # a capture line read twice: its first line holds
                continue
            failed = failing(line.results)
            if failed:  # only failures are kept; a later line of the trace holds
                scored.failing[line.trace_id] = failed
            else:
                scored.failing.pop(line.trace_id, None)
        if line.session_results:
            sessions += 1
            _add_flagged(scored, line.session_results)
    results_read(path, bool(scored.failing or sessions), torn)
    return scored


def _failed_tools(trace: Trace) -> list[str]:
    """Tools whose calls failed: the tools a case requires to be called and to succeed. A
    call the loop guard refused did not fail, nor did one the framework answered without
    running a tool (a tool the agent does not have, a middleware's refusal): no tool ran,
    and a fix may well never call it again."""
    return sorted(
        {
            span.tool_call.name
            for span in trace.spans
            if span.tool_call is not None
            and span.tool_call.failed
            and not span.attributes.get(GUARD_REFUSED)
            and not span.attributes.get(TOOL_NOT_RUN)
        }
    )


def _refused_limits(trace: Trace) -> list[ToolCallLimit]:
    """A call the loop guard refused may recur at most one time fewer than it was asked for
    (the refusal included): the guard let the earlier ones run."""
    calls = [canonical_call(call) for call in trace.tool_calls()]
    limits: list[ToolCallLimit] = []
    for span in trace.spans:
        if span.tool_call is None or not span.attributes.get(GUARD_REFUSED):
            continue
        limit = ToolCallLimit(
            name=span.tool_call.name,
            arguments=identity_arguments(span.tool_call),
            max_calls=max(0, calls.count(canonical_call(span.tool_call)) - 1),
        )
        if limit not in limits:
            limits.append(limit)
    return limits


def _describe(result: MetricResult) -> FailedMetric:
    return FailedMetric(
        name=result.name,
        score=result.score,
        threshold=result.threshold,
        reason=(result.reason or result.error or "")[:300],
    )


def _why(
    trace: Trace, selection: Sequence[Selection], scored: _Scored
) -> list[MetricResult] | None:
    """The failing results that select a trace (an empty list when only its status or its
    alerts select it), or None when it is not selected."""
    results = scored.failing.get(trace.id, []) + scored.flagged.get(trace.id, [])
    selected = (
        ("incomplete" in selection and trace.incomplete)
        or ("refusals" in selection and trace.refusal() is not None)
        or ("alerts" in selection and bool(trace.alerts))
        or ("metrics" in selection and bool(results))
    )
    return (results if "metrics" in selection else []) if selected else None


def _key(value: Any, turns: Sequence[dict[str, Any]]) -> str:
    """What makes two runs' requests the same: the text, and for a request that says
    nothing on its own ("Yes, please.") the answer it accepts, the session's last one. The
    same words after two different offers are two requests: one case each, and a later run
    that passed after one offer is no reference for the other."""
    text = " ".join(text_of(value).split())
    previous = last_answer(turns) if says_nothing_alone(text) else ""
    return f"{text}\n" + " ".join(previous.split()) if previous else text


def _answers(trace: Trace, paused: LatestKept[str, list[Any]]) -> list[Any] | None:
    """The answers a human gave a run, oldest first: those of the runs it goes on from that
    are in the capture, the one it resumed with (:data:`RESUME`), then those given while it
    ran (:data:`HUMAN_ANSWERS`); ``None`` for a run no human answered. ``paused`` keeps the
    answers of runs resumed and paused again (a second approval), for the run that goes on
    from them."""
    metadata = trace.metadata
    given = metadata.get(HUMAN_ANSWERS)
    given = given if isinstance(given, list) else []
    if RESUME not in metadata and not given:
        return None
    resumed = (
        [resume_by_question(metadata[RESUME], metadata.get(RESUME_QUESTIONS))]
        if RESUME in metadata
        else []
    )
    goes_on_from = metadata.get(RESUMES_TRACE_ID) if resumed else None
    earlier = paused.pop(str(goes_on_from), []) if goes_on_from is not None else []
    answers = [*earlier, *resumed, *given]
    if trace.status is RunStatus.INTERRUPTED:
        paused[trace.id] = answers
    return answers


PAUSES_KEPT = 10_000
"""Runs resumed and paused again whose answers are kept for the run that resumes them."""


def _case_id(input_key: str, signature: tuple[Any, ...]) -> str:
    """A readable, stable id: the input's first words and a hash of the input and the way it
    failed (the same failure found again gets the same id, so baselines line up)."""
    digest = hashlib.sha256(json.dumps([input_key, signature], default=str).encode()).hexdigest()
    words = re.findall(r"\w+", input_key.lower())[:6]
    return "-".join([*words, digest[:6]]) if words else f"case-{digest[:10]}"


DEFAULT_MAX_TURNS = 20
"""The earlier turns of its session a case keeps by default, the most recent: a case late in
a long session kept every turn before it, and a 3.7 MB capture of one 2,000-turn session
gave a 132 MB cases file, each case's conversation passed whole to the agent."""


def cases_from_capture(
    capture: str | os.PathLike[str],
    *,
    results: str | os.PathLike[str] | None = None,
    select: Sequence[Selection] = ALL_SELECTIONS,
    metrics: Sequence[str | Metric | SessionMetric] | None = None,
    judge: Any = None,
    on_bad_line: Callable[[Any], None] | None = None,
    max_turns: int | None = DEFAULT_MAX_TURNS,
) -> list[RegressionCase]:
    """Turn a capture's failures into regression cases. ``capture`` is a capture file or a
    capture directory of shards (read in the order the runs happened).

    A trace is selected when it did not complete (``incomplete``), answered with the model
    provider's refusal (``refusals``), raised a loop alert (``alerts``), or failed a metric
    or was flagged by a failing session metric (``metrics``): in ``results`` (a replay's
    ``--json`` file, or an online evaluator's results file) or, without one, in a replay of
    the capture run here with ``metrics`` (default: the default metrics, with ``judge`` if
    given). Traces with the same input that failed the same way (status or refusal, failed
    metrics, alert patterns, failed tools) become one case with their count. A case from a
    refusal fails in a suite when the agent refuses again (``refused``), unless its
    ``allow_refusal`` is set (an input the agent should refuse).

    Each case keeps the input, the earlier turns of its session (the last ``max_turns``;
    ``None`` keeps all, and the provenance counts those left out), the answers a human gave
    the run (``resume``: those it resumed with after pausing for one, a paused run and the
    run that resumed it being one turn, and those given while it ran), where it came from,
    and the checks its failure calls for: ``tool_failures`` always (the suite also fails a run
    that does not complete); ``tool_call_loops`` after a loop; ``tool_constraints`` for the
    tools that failed (``tools_must_succeed``: each to be called, and to succeed; a call of
    a tool the agent does not have ran no tool) and the calls the guard refused
    (``tool_call_limits``: at most one fewer than the count that was refused); the trace
    metrics it failed; and, when a later trace with the same input passed,
    ``trajectory_match`` against that trace's tool calls (not a paused run's, nor those of
    a run resumed from its checkpoint after a failure, which holds only the calls after it).
    """
    if max_turns is not None and max_turns < 0:
        raise MetricInputError(f"max_turns must be >= 0 (or None: all), got {max_turns}")
    unknown = sorted(set(select) - set(ALL_SELECTIONS))
    if unknown or not select:
        raise MetricInputError(
            f"select takes {', '.join(ALL_SELECTIONS)}; got {', '.join(select) or 'nothing'}"
        )
    # at least the last turn, which a follow-up's key reads ("Yes, please." after what)
    kept = None if max_turns is None else max(max_turns, 1)
    runs = runs_with_turns(capture, keep=kept, on_error=on_bad_line)
    first = next(runs, None)
    if first is None:
        raise CaptureError(f"{capture}: no traces in the file")
    scored = _from_results(results) if results is not None else _replayed(capture, metrics, judge)

    def trace_metric(name: str) -> bool:
        try:
            return not issubclass(metric_class(name), SessionMetric)
        except UnknownMetricError:  # a results file may name a metric this installation lacks
            return False

    # The capture streams past once, in run order: a trace is dropped once read, and what
    # is kept of the others is the input and output of each session's turns (a case's
    # earlier conversation) and the cases still waiting for a later run that passed.
    groups: dict[tuple[str, tuple[Any, ...]], RegressionCase] = {}
    awaiting: dict[str, list[RegressionCase]] = {}  # by input: no later passing run yet
    paused = LatestKept[str, list[Any]](PAUSES_KEPT)  # runs never resumed go
    for trace, turns, before in itertools.chain([first], runs):
        why = _why(trace, select, scored)
        # a run resumed after a pause for a human went on from its answers: the same request
        # answered otherwise (approved, rejected) is another case
        answers = _answers(trace, paused)
        input_key = _key(trace.input, turns)
        if answers is not None:
            input_key += "\n" + json.dumps(answers, sort_keys=True, default=str)
        if why is None:
            if not (
                trace.incomplete
                # neither failed nor passed: still going, or paused with the rest to come
                or trace.status in (RunStatus.UNFINISHED, RunStatus.INTERRUPTED)
                # went on from a checkpoint after a failure: only the calls after it, where
                # a suite runs the request from its start
                or (RESUMES_TRACE_ID in trace.metadata and answers is None)
                or trace.alerts
                or scored.failing.get(trace.id)
                or trace.id in scored.flagged
                or trace.refusal() is not None
            ):
                for case in awaiting.pop(input_key, []):
                    _check_against(case, trace)
            continue
        failed = sorted({r.name for r in why})
        alerts = [f"{alert.pattern}: {alert.message}" for alert in trace.alerts]
        tools = _failed_tools(trace)
        refused = trace.refusal()
        # how it ended: a status, or a refusal (the ids of the cases of other runs as before)
        ended = str(trace.status) if trace.incomplete else None
        signature = (
            "refused" if ended is None and refused is not None else ended,
            tuple(failed),
            tuple(sorted({alert.pattern for alert in trace.alerts})),
            tuple(tools),
        )
        existing = groups.get((input_key, signature))
        if existing is not None:
            existing.count += 1
            existing.provenance.trace_ids.append(trace.id)
            continue
        checks = list(BASE_CHECKS)
        if trace.alerts or "tool_call_loops" in failed:
            checks.append("tool_call_loops")
        limits = _refused_limits(trace)
        if tools or limits:
            checks.append("tool_constraints")
        checks += [name for name in failed if trace_metric(name) and name not in checks]
        shown = list(turns)[max(0, len(turns) - max_turns) :] if max_turns is not None else turns
        started = (
            datetime.datetime.fromtimestamp(trace.start_time, datetime.UTC).isoformat()
            if trace.start_time is not None
            else None
        )
        case = groups[(input_key, signature)] = RegressionCase(
            id=_case_id(input_key, signature),
            input=trace.input,
            conversation=list(shown) or None,
            resume=answers,
            metrics=checks,
            tools_must_succeed=tools or None,
            tool_call_limits=limits or None,
            provenance=CaseProvenance(
                capture=str(capture),
                trace_ids=[trace.id],
                session_id=trace.session_id,
                time=started,
                status=str(trace.status) if trace.status is not None else None,
                status_reason=trace.status_reason or trace.error,
                failing_metrics=[_describe(r) for r in why],
                alerts=alerts,
                failed_tools=tools,
                refusal=refused,
                turns_left_out=before - len(shown),
            ),
        )
        awaiting.setdefault(input_key, []).append(case)
    return list(groups.values())


def _check_against(case: RegressionCase, reference: Trace) -> None:
    """A later run with the case's input that passed: the case checks its tool calls
    (``trajectory_match``)."""
    case.expected_tool_calls = [
        ExpectedToolCall(name=call.name, arguments=call.arguments)
        for call in reference.tool_calls()
    ]
    case.provenance.reference_trace_id = reference.id
    case.metrics.append("trajectory_match")
