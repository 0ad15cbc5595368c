"""Tool failures without a judge: which calls failed, and whether the agent recovered."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..schema._trace import EvalCase, Span, SpanKind, ToolCall, Trace, text_of
from ._loops import Branches, call_branches, canonical_call
from ._protocol import Metric, MetricKind, Score, no_calls_to_score, no_trace_to_check
from ._registry import register_metric

__all__ = ["ToolFailures", "states_failure"]

_FAILURE_WORDS = re.compile(
    r"\b(sorry|unable|could ?n[o']t|can ?n[o']t|can not|not able|failed|failure|"
    r"unavailable|not available|went wrong|apologi[sz]e|"
    # what an agent tells a user whose lookup raised because there is nothing to find
    r"not found|no such|does ?n[o']t exist|do ?n[o']t exist|no record|"
    # the same in the languages the default embedder's language check names most often:
    # Spanish, French, German, Italian, Portuguese
    r"lo siento|no (he )?pod(ido|ía)|no pude|no se pudo|no está disponible|"
    r"désolée?|je n'ai pas pu|n'a pas pu|impossible de|n'est pas disponible|"
    r"leider|konnte nicht|nicht möglich|fehlgeschlagen|nicht verfügbar|"
    r"mi dispiace|non è stato possibile|non sono riuscit[oa]|non è disponibile|"
    r"desculpe|não foi possível|não consegui|não está disponível|"
    # Russian
    r"извините|к сожалению|не удалось|не могу|не найден[аоы]?|недоступ\w*)\b|"
    # Chinese, Japanese and Korean, written without spaces (or with particles joined to
    # the word): no word boundary to look for
    r"抱歉|对不起|對不起|无法|無法|未能|失败|失敗|找不到|未找到|没有找到|不存在|不可用|"
    r"申し訳|すみません|できません|見つかりません|存在しません|"
    r"죄송|실패|찾을 수 없|할 수 없|존재하지 않",
    re.IGNORECASE,
)


def states_failure(answer: Any) -> bool:
    """Whether a final answer reads as a statement that the task failed (a heuristic: words
    such as "sorry", "unable", "could not", "failed", "unavailable", "not found", "does not
    exist", and the like in Spanish, French, German, Italian, Portuguese, Russian, Chinese,
    Japanese and Korean: "lo siento", "désolé", "leider", "mi dispiace", "não foi possível",
    "к сожалению", "抱歉", "申し訳", "죄송")."""
    return bool(_FAILURE_WORDS.search(text_of(answer)))


@dataclass(frozen=True)
class _Made:
    """A call as recovery reads it: its identity (:func:`canonical_call`), whether it failed,
    and where it was made: its model step (None for a call of no step), the nearest agent
    span at or above its span (None in a trace with none), the ids of every agent span
    above it, and when it started. Each is read once: a run of thousands of calls that
    failed alike compares every pair."""

    signature: tuple[str, str]
    failed: bool
    step: int | None
    agent: Span | None
    within: frozenset[str]
    started: float
    tasks: Branches = ()
    """The graph steps it was made in, with the task of each that made it."""


def _where_made(trace: Trace, calls: Sequence[ToolCall]) -> list[_Made]:
    """Each call's :class:`_Made`, read once a call failed (most runs have none)."""
    step_of = {
        id(made): number for number, step in enumerate(trace.steps()) for made in step.tool_calls
    }
    nearest: dict[str, Span | None] = {}  # the nearest agent span at or above each span
    agents: dict[str, frozenset[str]] = {}  # the agent spans at or above each span
    made: dict[int, tuple[Span | None, frozenset[str], float]] = {}  # a run's call → its span's
    for span in trace.spans:  # a parent starts before its children
        parent = span.parent_id
        above = nearest.get(parent) if parent is not None else None
        within = agents.get(parent, frozenset()) if parent is not None else frozenset()
        nearest[span.id] = span if span.kind is SpanKind.AGENT else above
        agents[span.id] = within | {span.id} if span.kind is SpanKind.AGENT else within
        if span.tool_call is not None:
            made[id(span.tool_call)] = (above, within, span.start_time or 0.0)
    branches = call_branches(trace)
    return [
        _Made(
            canonical_call(call),
            call.failed,
            step_of.get(id(call)),
            *made.get(id(call), (None, frozenset(), 0.0)),
            tuple(branches.get(id(call), ())),
        )
        for call in calls
    ]


def _recovered(index: int, made: Sequence[_Made], said_so: Callable[[Span | None], bool]) -> bool:
    """A failed call is recovered when a later call differs from it (another tool, or other
    arguments), when the same call later succeeded (a retry that worked), or when the final
    answer of the run, or of the agent that made the call, says the task failed. A later
    call is one asked for after the failure was seen: a call asked for in the same step was
    asked for beside it; a call of another agent running beside the one that made it
    (before that agent's span ended, and not an agent it runs itself: CrewAI's
    ``async_execution`` tasks, a graph's parallel branches) did not see it, nor did a call
    of another task of a graph step the failing call's task ran in (a graph's tasks see
    each other's results once their step ends)."""
    where = made[index]
    agent = where.agent
    handed_on = math.inf if agent is None or agent.end_time is None else agent.end_time
    task_in = dict(where.tasks)
    for there in made[index + 1 :]:
        if where.step is not None and there.step == where.step:  # asked for together
            continue
        if any(task_in.get(step, task) != task for step, task in there.tasks):
            continue  # made in a task beside the failing call's
        if (
            there.agent is not agent
            and there.started < handed_on
            and (agent is None or agent.id not in there.within)
        ):  # ran beside it
            continue
        if there.signature != where.signature or not there.failed:
            return True
    return said_so(agent)


@register_metric
class ToolFailures(Metric):
    """How a run's tool calls fared: failed calls, and failures the agent did not recover from.

    A call failed when it raised, returned an error object, or its result reports a failure
    (:attr:`ToolCall.failed`: an error text, an HTTP status of 400 or more, MCP's
    ``isError``, Python's ``[Errno 2] ...``, a short "Permission denied", ...). A failure is
    recovered when a later call is another tool or other arguments, when the same call
    later succeeded, or when the final answer of a completed run (or of the agent that
    made the call) says the task failed; a call the model asked for in the same step (its
    parallel calls), a call of another agent running beside the one that made it, or one
    of another task of the graph step it was made in, came before the failure was seen,
    and recovers nothing. Each call risks 0 (succeeded), 0.5 (failed, recovered)
    or 1 (failed, not recovered); the score is 1 − the mean risk. So one failure the agent
    owned up to in a one-call run scores 0.5, a retry that worked after one failure 0.75,
    and a run whose every call failed unnoticed 0.0. A call its framework ran again
    without the model asking (a retry middleware after the tool raised) is one call, judged
    by its last run, what the agent was given; ``metadata["runs_retried"]`` counts the runs
    so replaced. ``metadata["failures"]`` lists each failed call with its arguments, error
    and whether it was recovered. It feeds the session metrics as the ``tool_failures``
    signal.
    """

    name = "tool_failures"
    version: ClassVar[str] = "3"
    """2: a call of another agent running beside the failing one recovers nothing, and a
    model call of another agent does not end a retry (1 counted both); 3: nor does a call
    of another task of the graph step the failing call was made in."""
    reads_steps: ClassVar[bool] = True
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC
    default_threshold: ClassVar[float] = 0.7

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        trace = case.trace
        if trace is None:
            return no_trace_to_check()
        calls = trace.tool_calls()
        if not calls:
            if not trace.completed:  # failed, or paused for a human: no vacuous pass
                return no_calls_to_score(trace)
            return Score(1.0, "no tool calls", {"tool_calls": 0, "failed": 0, "unrecovered": 0})

        # the answers are read only when a failure is followed by nothing else: most runs
        # have none
        def said_so(agent: Span | None) -> bool:
            if trace.incomplete:  # an apology in a run that did not complete recovers nothing
                return False
            return states_failure(case.actual_output) or (
                agent is not None and agent.error is None and states_failure(agent.output)
            )

        failures: list[dict[str, Any]] = []
        made: list[_Made] = []
        for index, call in enumerate(calls):
            if call.failed:
                made = made or _where_made(trace, calls)
                failures.append(
                    {
                        "index": index,
                        "name": call.name,
                        "arguments": call.arguments,
                        "error": call.error if call.error else text_of(call.result)[:500],
                        "recovered": _recovered(index, made, said_so),
                    }
                )
        unrecovered = sum(1 for failure in failures if not failure["recovered"])
        value = 1.0 - (len(failures) + unrecovered) / (2 * len(calls))
        metadata: dict[str, Any] = {
            "tool_calls": len(calls),
            "failed": len(failures),
            "unrecovered": unrecovered,
            "failures": failures,
        }
        # runs its framework made again (a retry after the tool raised): the agent was given
        # the last run's result, so a call is judged by that; the earlier runs are told
        rerun = len(trace.tool_calls(every_run=True)) - len(calls)
        if rerun:
            metadata["runs_retried"] = rerun
        retried = (
            f" (the framework ran a call again {rerun} times: each call counts as its last run)"
            if rerun
            else ""
        )
        if not failures:
            return Score(1.0, f"none of {len(calls)} tool calls failed{retried}", metadata)
        names = ", ".join(sorted({failure["name"] for failure in failures}))
        return Score(
            value,
            f"{len(failures)} of {len(calls)} tool calls failed ({names}), "
            f"{unrecovered} not recovered{retried}",
            metadata,
        )
