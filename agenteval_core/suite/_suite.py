"""EvalSuite: run an agent k times per case, score every run, report pass@k and pass^k."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import io
import json
import os
import sys
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict, Unpack

from pydantic import BaseModel, Field, ValidationError, field_validator
from rich.console import Console
from rich.progress import Progress

from .._errors import CaptureError, MetricInputError, describe_validation
from .._options import check_options
from .._sync import run_sync
from .._tables import TextTable, show, unscored_note
from .._text import says_nothing_alone
from ..engine._engine import Engine, resolve_metrics
from ..engine._summary import ResultSummary
from ..metrics._protocol import Metric
from ..metrics._statistics import (
    Estimator,
    MeanPassK,
    PassKEstimate,
    best_pass_k,
    estimate_pass_k,
    mean_pass_k,
)
from ..schema._results import MetricResult, failing, passes
from ..schema._trace import EvalCase, RunStatus, Trace, known_version, text_of
from ._cases import RegressionCase

__all__ = [
    "AgentFn",
    "AttemptOutcome",
    "CaseReport",
    "EvalSuite",
    "RunOptions",
    "RunResult",
    "SuiteReport",
    "attempt_outcome",
    "case_label",
    "missed_bounds",
    "unreachable_bounds",
]

AgentFn = Callable[..., "str | Trace | EvalCase | Awaitable[str | Trace | EvalCase]"]
"""An agent under test: takes the case input (and, if it has a ``conversation`` parameter, the
case's earlier turns; if it has a ``resume`` parameter, the answers a human gave the case's
run, oldest first: each time it paused, and while it went on, as a CrewAI flow's
``@human_feedback`` or ``ask()`` is answered) and returns its final output, a Trace or an
EvalCase (sync or async)."""

SUITE_REPORT_VERSION = 1
"""Version of a saved suite report's JSON form."""

AttemptOutcome = Literal[
    "passed",
    "failed",
    "not_scored",
    "incomplete",
    "refused",
    "agent_error",
    "agent_timeout",
    "out_of_context",
]
"""How one attempt ended: ``passed`` (something scored it and nothing failed), ``failed`` (a
metric failed its threshold or errored), ``not_scored`` (every metric skipped it: there was
nothing to check), ``incomplete`` (the run ended in error, was stopped, cancelled, timed out
or hit a limit), ``refused`` (its answer was the model provider's refusal, and the case does
not allow one: ``EvalCase.allow_refusal``), ``agent_error`` (the agent function raised, or
returned a trace it had returned for another case), ``agent_timeout`` (the agent function
did not return within the suite's ``timeout``),
``out_of_context`` (the case's request only answers its earlier turns, "Yes, please.", and
the agent function takes no ``conversation`` to be given them; or the case's run went on
after a human's answers, and it takes no ``resume`` to be given them: it was not run). Only
``passed`` is a pass."""


class RunResult(BaseModel):
    """One attempt of one case."""

    case_id: str
    attempt: int
    passed: bool
    """Only when ``outcome`` is ``passed``."""
    outcome: AttemptOutcome
    reason: str = ""
    """Why the attempt passed or did not: the failing metrics with their scores, the run's
    status, or why nothing scored it."""
    status: str | None = None
    """How the run ended (its trace's ``status``), when the run produced a trace."""
    output: Any = None
    error: str | None = None
    """The agent's exception, if it raised."""
    results: list[MetricResult] = Field(default_factory=list)


class CaseReport(BaseModel):
    """All attempts of one case, with pass@k / pass^k over them."""

    case_id: str
    label: str
    """How the case is shown: its id when one was given, else its input's first words."""
    input: Any = None
    runs: list[RunResult]
    passes: int
    estimate: PassKEstimate
    """Per-case figures: the chosen estimator's point estimates, and the posterior's median
    (shown) with its credible interval."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The case's metadata (a regression case's provenance)."""
    definition: dict[str, Any] | None = None
    """The case as it was run besides its id and input: the fields of :class:`EvalCase` it
    set that say what a run is asked and held to (``conversation``, ``expected_output``,
    ``expected_tool_calls``, ``tools_must_succeed``, ``tool_call_limits``,
    ``allow_refusal``, ...). A baseline whose definition differs checked another case under
    the same id. ``None`` in a report saved before reports kept it."""

    def outcomes(self) -> dict[str, int]:
        """How many attempts ended each way, e.g. ``{"passed": 7, "incomplete": 3}``."""
        return dict(Counter(run.outcome for run in self.runs))

    def checks(self) -> dict[str, tuple[str, float, str | None]]:
        """The metrics that scored the case's attempts, each with its ``version``,
        ``threshold`` and, for a judge metric, the judge model that answered (``None``
        when no judge was asked): with the definition, what decides whether an attempt
        passes. Empty when no attempt was scored (the agent raised on every one)."""
        checks: dict[str, tuple[str, float, str | None]] = {}
        for run in self.runs:
            for result in run.results:
                known = checks.get(result.name)
                if known is None or known[2] is None:
                    checks[result.name] = (result.version, result.threshold, result.judge_model)
        return checks


class SuiteReport(BaseModel):
    """A suite run: per-case estimates, per-metric aggregates and suite-level figures.

    The headline ``pass_at_k`` / ``pass_pow_k`` is the posterior mean of the average over
    cases of each case's pass@k / pass^k (each case's success rate with a Beta posterior),
    and ``mean`` gives its credible interval: one quantity, and the headline lies inside
    its interval. ``estimate_pass_at_k`` / ``estimate_pass_pow_k`` average the chosen
    estimator's point estimates (``plugin`` or ``unbiased``) instead. ``pooled`` treats every
    run of every case as one Bernoulli sample: another quantity, kept for reference.
    """

    format_version: int = SUITE_REPORT_VERSION
    """Version of this report's JSON form (a saved report is a suite's baseline)."""

    @field_validator("format_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        return known_version(value, SUITE_REPORT_VERSION, "suite report format")

    name: str
    k: int
    estimator: Estimator
    cases: list[CaseReport]
    metrics: list[dict[str, Any]]
    pass_at_k: float
    pass_pow_k: float
    estimate_pass_at_k: float
    estimate_pass_pow_k: float
    mean: MeanPassK
    attempts: int
    pooled: PassKEstimate

    def failed_cases(self) -> list[CaseReport]:
        """The cases with an attempt that did not pass, in case order."""
        return [case for case in self.cases if case.passes < len(case.runs)]

    def summary(self) -> str:
        """The summary as plain text (also what ``str(report)`` shows): each table at
        ``$COLUMNS`` when set, else as wide as it needs."""
        console = Console(file=io.StringIO(), color_system=None)
        self.show(console)
        return console.file.getvalue()  # type: ignore[attr-defined]

    def show(self, console: Console | None = None) -> None:
        """Print the summary on ``console`` (default: standard output) in a layout that fits
        it: no name or number is ever broken across lines."""
        console = console if console is not None else Console()
        level = f"{round(self.pooled.ci_level * 100)}%"
        cases = TextTable(
            f"{self.name}: {len(self.cases)} cases × {self.attempts} attempts",
            ("case", "passes", f"pass@{self.k}", f"pass^{self.k}", "not passed"),
        )
        for case in self.cases:
            estimate = case.estimate
            (at_lo, at_hi), (pow_lo, pow_hi) = estimate.pass_at_k_ci, estimate.pass_pow_k_ci
            others = {o: n for o, n in case.outcomes().items() if o != "passed"}
            cases.add_row(
                case.label,
                f"{case.passes}/{len(case.runs)}",
                f"{estimate.pass_at_k_median:.3f} [{at_lo:.3f}, {at_hi:.3f}]",
                f"{estimate.pass_pow_k_median:.3f} [{pow_lo:.3f}, {pow_hi:.3f}]",
                ", ".join(f"{n} {o.replace('_', ' ')}" for o, n in sorted(others.items())),
            )
        cases.notes.append(
            f"per case: posterior median [{level} credible interval] of pass@{self.k} and "
            f"pass^{self.k}"
        )
        show(console, cases)
        metrics = TextTable(
            "metrics",
            ("metric", "mean", "pass rate", "errors", "skipped"),
            numeric=("mean", "pass rate", "errors", "skipped"),
        )
        for row in self.metrics:
            metrics.add_row(
                row["metric"],
                "-" if row["mean"] is None else f"{row['mean']:.3f}",
                "-" if row["pass_rate"] is None else f"{row['pass_rate']:.3f}",
                str(row["errors"]),
                str(row["skipped"]),
            )
            missing = row["errors"] + row["skipped"]
            note = unscored_note(row["metric"], missing, row["top_reasons"], "run")
            if note:
                metrics.notes.append(note)
        show(console, metrics)
        (at_lo, at_hi), (pow_lo, pow_hi) = self.mean.pass_at_k_ci, self.mean.pass_pow_k_ci
        console.print(
            f"suite (mean over cases, posterior mean): pass@{self.k} = {self.pass_at_k:.3f} "
            f"[{level} CI {at_lo:.3f}, {at_hi:.3f}], pass^{self.k} = {self.pass_pow_k:.3f} "
            f"[{level} CI {pow_lo:.3f}, {pow_hi:.3f}]",
            highlight=False,
        )

    def __str__(self) -> str:
        return self.summary()

    def to_json(self, indent: int | None = 2) -> str:
        """The whole report as JSON."""
        return json.dumps(self.model_dump(mode="json"), indent=indent, default=str)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the report as JSON: a later run compares with it as its baseline."""
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SuiteReport:
        """Read a report written by :meth:`save`.

        Raises:
            CaptureError: the file is missing, not JSON, or not a suite report.
        """
        source = Path(path)
        if not source.is_file():
            raise CaptureError(
                f"{path}: no such report; write one with `agenteval suite ... --save {path}`"
            )
        try:
            report = cls.model_validate_json(source.read_bytes())
        except ValidationError as exc:
            raise CaptureError(
                f"{path}: not a suite report (--save output): {describe_validation(exc)}"
            ) from None
        return report


_NOT_DEFINITION = frozenset(
    {"id", "input", "trace", "agent_trace", "actual_output", "actual_state", "metrics", "metadata"}
)
"""The fields of :class:`EvalCase` that are not its definition: its id and input (kept on
their own), what a run produced, the checks' names (its results name each metric with its
version and threshold) and metadata (a regression case's provenance and count, which a new
capture of the same failure changes)."""


def case_definition(case: EvalCase) -> dict[str, Any]:
    """``case``'s definition as :attr:`CaseReport.definition` keeps it: the fields it set,
    as JSON values."""
    fields = set(EvalCase.model_fields) - _NOT_DEFINITION
    return case.model_dump(mode="json", include=fields, exclude_defaults=True, fallback=str)


def without_bounds(
    report: SuiteReport, bounds: str, *, unjudged: Collection[str] | None = None
) -> list[str]:
    """Why ``report`` fails a gate that was given no bound (``bounds`` names those it could
    have been given): for any failed attempt, as a test runner fails for any failed test. A
    gate that names no bound must never pass an agent that fails its cases. Given the ids
    of the cases a baseline cannot judge (``unjudged``: new since it, or checked otherwise
    now), only those: the baseline judges the others, and has nothing to judge these by."""
    cases, among, which = report.failed_cases(), len(report.cases), ""
    if unjudged is not None:
        cases = [case for case in cases if case.case_id in unjudged]
        among, which = len(unjudged), " the baseline cannot judge (new or checked otherwise)"
    failed = [case.label for case in cases]
    if not failed:
        return []
    shown = ", ".join(failed[:3]) + (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
    return [
        f"{len(failed)} of {among} case(s){which} failed an attempt ({shown}); with no "
        f"{bounds}, every attempt must pass"
    ]


def missed_bounds(
    report: SuiteReport,
    min_pass_at_k: float | None,
    min_pass_pow_k: float | None,
    *,
    names: tuple[str, str],
) -> list[str]:
    """The bounds ``report``'s headline misses (``names``: what the caller calls them), as a
    metric's threshold is missed: below it by more than 1e-9."""
    k = report.k
    headline = (
        (f"pass@{k}", report.pass_at_k, min_pass_at_k),
        (f"pass^{k}", report.pass_pow_k, min_pass_pow_k),
    )
    return [
        f"{label} {value:.3f} < {name} {bound:g}"
        for (label, value, bound), name in zip(headline, names, strict=True)
        if bound is not None and not passes(value, bound)
    ]


MOST_ATTEMPTS_SUGGESTED = 100_000
"""The most attempts per case :func:`unreachable_bounds` looks through for a bound's need."""


def unreachable_bounds(
    k: int,
    attempts: int,
    min_pass_at_k: float | None,
    min_pass_pow_k: float | None,
    *,
    names: tuple[str, str, str],
    prior: tuple[float, float] = (1.0, 1.0),
) -> list[str]:
    """Why a bound can never be met with ``attempts`` attempts per case (``names``: what the
    caller calls the two bounds and the attempts): the headline is a posterior mean, below
    1 after any number of attempts, so a gate that asks more than ``attempts`` all passing
    can show fails every agent, however good. Empty when both bounds can be met."""
    problems = []
    bounds = ((f"pass@{k}", min_pass_at_k), (f"pass^{k}", min_pass_pow_k))
    for index, (label, bound) in enumerate(bounds):
        best = best_pass_k(attempts, k, prior)[index]
        if bound is None or passes(best, bound):
            continue
        needed = next(
            (
                n
                for n in range(attempts + 1, MOST_ATTEMPTS_SUGGESTED + 1)
                if passes(best_pass_k(n, k, prior)[index], bound)
            ),
            None,
        ) if bound < 1.0 else None  # fmt: skip
        remedy = (
            f"give {names[2]} {needed} or more ({label} up to "
            f"{best_pass_k(needed, k, prior)[index]:.3f}) or a lower bound"
            if needed is not None
            else "no number of attempts reaches it: give a lower bound"
        )
        problems.append(
            f"{names[index]} {bound:g} cannot be met with {attempts} attempts per case: "
            f"{label} is a posterior mean, at most {best:.3f} when every attempt passes; "
            f"{remedy}"
        )
    return problems


def _flatten(items: Iterable[Any]) -> list[Any]:
    flat: list[Any] = []
    for item in items:
        if isinstance(item, list | tuple | Iterator):
            flat.extend(item)
        else:
            flat.append(item)
    return flat


def _with_output(case: EvalCase, produced: str | Trace | EvalCase) -> EvalCase:
    """The suite's case, with the run the agent produced: the case keeps its expectations."""
    if isinstance(produced, EvalCase):  # it supplies the run and its end state, nothing else
        update: dict[str, Any] = {"trace": produced.trace, "actual_output": produced.actual_output}
        if produced.actual_state is not None:
            update["actual_state"] = produced.actual_state
        return case.model_copy(update=update)
    if isinstance(produced, Trace):
        return case.model_copy(update={"trace": produced, "actual_output": produced.output})
    trace = case.trace.model_copy(update={"output": produced}) if case.trace is not None else None
    return case.model_copy(update={"trace": trace, "actual_output": produced})


def _describe(result: MetricResult) -> str:
    if result.score is None:
        return f"{result.name}: error: {result.error}"
    return f"{result.name} {result.score:.3f} < {result.threshold:g}: {result.reason}"


def attempt_outcome(case: EvalCase, results: Sequence[MetricResult]) -> tuple[AttemptOutcome, str]:
    """Whether one scored run passes, and why: a run that did not complete fails; so does a
    run whose answer was the provider's refusal (returned, or raised as its error:
    :meth:`Trace.raised_refusal`), unless the case allows one, and a metric that failed its
    threshold or errored; a run no metric scored is not scored (a failure too), unless it
    ended in a refusal the case allows; otherwise it passed."""
    trace = case.trace
    # a run that raised its model's refusal as its error ended in that refusal
    raised = trace.raised_refusal() if trace is not None else None
    if trace is not None and trace.incomplete and raised is None:
        why = (
            f": {trace.status_reason or trace.error}" if trace.status_reason or trace.error else ""
        )
        return "incomplete", f"the run did not complete ({trace.status or 'error'}){why}"
    if trace is not None and _paused_past_its_answers(case, trace):
        # scored on what it did before that pause, it could pass what it never reached
        return "incomplete", (
            f"the run paused for a human again after the case's {len(case.resume or [])} "
            f"answer(s), where the captured run went on ({trace.status_reason or 'paused'}): "
            "what the case checks was not reached; give the agent each answer its run asks for"
        )
    refused = trace.refusal() if trace is not None else None
    said = f": {refused}" if refused else ""
    how = (
        f"; the run raised it as its error ({trace.error})"
        if raised is not None and trace is not None
        else ""
    )
    if refused is not None and not case.allow_refusal:
        # no answer: what metrics say of the rest checks no task done
        return "refused", (
            f"the model refused to answer{said}{how} (allow_refusal=True on a case the agent "
            "should refuse)"
        )
    failed = failing(results)
    if failed:
        return "failed", "; ".join(_describe(r) for r in failed)
    scored = [r.name for r in results if r.score is not None]
    if refused is not None and not scored:
        # what the case allows is what the run did (metrics skip a run that ended in error)
        return "passed", f"the model refused to answer{said}, as the case allows{how}"
    if not scored:
        reasons = sorted({f"{r.name}: {r.reason}" for r in results})
        return "not_scored", "no metric scored this run (" + "; ".join(reasons) + ")"
    return "passed", "scored by " + ", ".join(scored) + "; none failed"


def _paused_past_its_answers(case: EvalCase, trace: Trace) -> bool:
    """Whether a run given a human's answers (``case.resume``) still waits for a human at
    its end, where the run the case was made from went on (a regression case made from a
    paused run says so in its provenance, and may end paused again)."""
    if not case.resume or trace.status is not RunStatus.INTERRUPTED:
        return False
    provenance = case.metadata.get("provenance")
    captured = provenance.get("status") if isinstance(provenance, dict) else None
    return captured != RunStatus.INTERRUPTED


def case_label(case: EvalCase, limit: int = 48) -> str:
    """How a case is shown: its id when one was given, else its input's first words."""
    if "id" in case.model_fields_set:
        return case.id
    text = " ".join(text_of(case.input).split())
    if not text:
        return case.id[:8]
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip() + "…"  # at a word's end


def _labels(cases: Sequence[EvalCase]) -> list[str]:
    """Each case's label, numbered where two cases would read the same."""
    labels = [case_label(case) for case in cases]
    totals, seen = Counter(labels), Counter[str]()
    numbered = []
    for label in labels:
        seen[label] += 1
        numbered.append(f"{label} #{seen[label]}" if totals[label] > 1 else label)
    return numbered


def _call(agent_fn: AgentFn, value: Any, arguments: dict[str, Any]) -> Any:
    """A sync agent on a worker thread. A StopIteration it raises (a ``next()`` that found
    nothing) cannot cross into asyncio's future, which would wait forever: it comes back as
    the agent's error."""
    try:
        return agent_fn(value, **arguments)
    except StopIteration as exc:
        raise RuntimeError(
            f"the agent raised StopIteration{f': {exc}' if str(exc) else ''}"
        ) from exc


def _not_run(
    case: EvalCase, index: int, outcome: AttemptOutcome, reason: str, error: str | None = None
) -> RunResult:
    """An attempt the agent never finished: nothing to score."""
    return RunResult(
        case_id=case.id, attempt=index, passed=False, outcome=outcome, reason=reason, error=error
    )


async def _on_daemon_thread(agent_fn: AgentFn, value: Any, arguments: dict[str, Any]) -> Any:
    """A sync agent's attempt on a daemon thread of its own, in a copy of the caller's
    context (as ``asyncio.to_thread``). An attempt that times out is abandoned, not stopped
    (a thread cannot be): on a thread of asyncio's executor it would keep ``asyncio.run``,
    and so the process, from ending; a daemon thread ends with the process."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not done.done():  # an abandoned attempt's future was cancelled
            outcome()

    def attempt() -> None:
        try:
            outcome = functools.partial(done.set_result, _call(agent_fn, value, arguments))
        except BaseException as exc:  # the agent's, raised where the suite awaits it
            outcome = functools.partial(done.set_exception, exc)
        with contextlib.suppress(RuntimeError):  # the suite's loop has closed: none waits
            loop.call_soon_threadsafe(settle, outcome)

    context = contextvars.copy_context()
    threading.Thread(
        target=context.run, args=(attempt,), name="agenteval-attempt", daemon=True
    ).start()
    return await done


def _follows_up(case: EvalCase) -> bool:
    """Whether the case's request only answers its earlier turns ("Yes, please." accepting an
    offer): asked alone, it is another request, which may pass with nothing checked (no tool
    called, no loop possible). A request that stands on its own is the same request alone, as
    a stateless agent is asked it."""
    return (
        bool(case.conversation) and isinstance(case.input, str) and says_nothing_alone(case.input)
    )


_OUT_OF_CONTEXT = (
    "not run: the request only answers the case's earlier turns, and the agent function "
    "takes no `conversation` parameter to be given them (asked alone, it is another request); "
    "add one (the earlier turns, oldest first, each {'input': ..., 'output': ...}) and pass "
    "them to the agent as its history"
)


_ANOTHER_CASES_RUN = (
    "the agent function returned a trace it had returned for another case ({case}; trace "
    "{trace}): each attempt returns the trace of its own run. Attempts run at once "
    "(concurrency), and an evaluator they share holds all their runs, its last one perhaps "
    "another attempt's: give each attempt an OnlineEvaluator of its own (its captured() "
    "holds only its runs), or find the run by a session id of its own"
)


_NO_RESUME = (
    "not run: the case's run went on from a human's answers (the case's `resume`: given "
    "at a pause, or while it ran), and the agent function takes no `resume` parameter to "
    "be given them (run without them, it stops or goes otherwise where the run went on); "
    "add one, give the agent's run each answer where it asks (LangGraph: "
    "`invoke(resume_command(answer, paused), config)` at each pause, with "
    "`agenteval_langchain.resume_command`; a CrewAI flow: `resume(answer)`, or its "
    "feedback provider) and return the trace of the run resumed last"
)


def _optional_parameters(agent_fn: AgentFn) -> frozenset[str]:
    """Which of the arguments a suite gives an agent that asks for them it takes:
    ``conversation``, ``resume``."""
    try:
        parameters = inspect.signature(agent_fn).parameters
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        return frozenset()
    return frozenset({"conversation", "resume"} & parameters.keys())


class RunOptions(TypedDict, total=False):
    """How :meth:`EvalSuite.run` and :meth:`EvalSuite.arun` run a suite, defined once (see
    :meth:`EvalSuite.arun` for each option and its default)."""

    attempts: int | None
    estimator: Estimator
    ci_level: float
    prior: tuple[float, float]
    concurrency: int
    progress: bool | None
    timeout: float | None


class EvalSuite:
    """A set of cases and the metrics that judge them.

    ::

        suite = EvalSuite("support agent").add_cases(cases).add_evaluators(
            ToolCallAccuracy(), "parameter_correctness"
        )
        report = suite.run(run_agent, k=5)
        print(report.summary())
    """

    def __init__(self, name: str, *, judge: Any = None, embedder: Any = None) -> None:
        self.name = name
        self.judge = judge
        """Given to the judge metrics added by name (and only those)."""
        self.embedder = embedder
        """Given to the embedding metrics added by name."""
        self.cases: list[EvalCase] = []
        self.evaluators: list[Metric] = []

    def add_cases(
        self, *cases: EvalCase | RegressionCase | Iterable[EvalCase | RegressionCase]
    ) -> EvalSuite:
        """Add cases (or lists of cases): ``EvalCase`` objects, or regression cases as
        :func:`cases_from_capture` makes them (run as :meth:`RegressionCase.to_eval_case`
        gives them); returns the suite for chaining."""
        for case in _flatten(cases):
            if isinstance(case, RegressionCase):
                case = case.to_eval_case()
            if not isinstance(case, EvalCase):
                raise MetricInputError(
                    f"add_cases takes EvalCase or RegressionCase objects, got {type(case).__name__}"
                )
            self.cases.append(case)
        return self

    def add_evaluators(self, *metrics: Metric | str | Iterable[Metric | str]) -> EvalSuite:
        """Add trace metrics, as instances or registry names; returns the suite for chaining.
        Metrics added by name get the suite's judge or embedder when they take one."""
        trace_metrics, session_metrics = resolve_metrics(
            _flatten(metrics), judge=self.judge, embedder=self.embedder
        )
        if session_metrics:
            raise MetricInputError(
                f"add_evaluators takes trace metrics (or their names), got session metric "
                f"{session_metrics[0].name!r}; session metrics score sessions, not cases"
            )
        self.evaluators += trace_metrics
        return self

    def run(
        self, agent_fn: AgentFn | None = None, k: int = 1, **options: Unpack[RunOptions]
    ) -> SuiteReport:
        """Run every case k times and score each run; see :meth:`arun` (the same
        ``options``)."""
        return run_sync(self.arun(agent_fn, k, **options))

    async def arun(
        self, agent_fn: AgentFn | None = None, k: int = 1, **options: Unpack[RunOptions]
    ) -> SuiteReport:
        """Run every case ``attempts`` times (default k; at most ``concurrency`` at once) and
        score each run.

        ``agent_fn`` gets the case input and returns the final output (the case's recorded
        trace is kept with that output), a ``Trace`` or an ``EvalCase``; it may be async.
        Without ``agent_fn`` the cases are scored as they are. An attempt passes only when at
        least one metric scored it and none failed its threshold or errored, and the run
        completed (``interrupted``, a pause for a human, is not a failure) with an answer
        that is no provider's refusal (unless the case has ``allow_refusal``); an attempt that
        every metric skipped is "not scored", and counts as a failure; an agent that raises
        fails its attempt with its error recorded (see :data:`AttemptOutcome`). Each case is
        scored by the suite's evaluators plus the metrics it names in ``metrics``. An agent
        that returns an ``EvalCase`` supplies the run (its trace, output and
        ``actual_state``); the suite's case keeps its own expectations.
        pass@k and pass^k per case come from its c passes in n = ``attempts`` runs (n ≥ k;
        more attempts than k make the unbiased estimator meaningful).

        ``options`` (:class:`~agenteval_core.RunOptions`): ``attempts`` (default k),
        ``estimator`` (default ``"plugin"``), ``ci_level`` (0.95), ``prior`` ((1, 1)),
        ``concurrency`` (4), ``progress`` (a bar on stderr; default: when stderr is a
        terminal), ``timeout`` (seconds an agent call may take; ``None``, the default: no
        limit): an attempt whose agent has not returned by then fails as ``agent_timeout``
        and the suite goes on (an async agent is cancelled; a sync agent's thread cannot be
        stopped, so it is abandoned, and ends with the process).
        """
        check_options(options, RunOptions, "EvalSuite.arun")
        attempts = options.get("attempts")
        timeout = options.get("timeout")
        if timeout is not None and not timeout > 0:
            raise MetricInputError(f"timeout must be a number of seconds > 0, got {timeout}")
        estimator: Estimator = options.get("estimator", "plugin")
        concurrency, progress = options.get("concurrency", 4), options.get("progress")
        if not self.cases:
            raise MetricInputError(f"suite {self.name!r} has no cases; call add_cases first")
        if not self.evaluators and not all(case.metrics for case in self.cases):
            raise MetricInputError(
                f"suite {self.name!r} has no evaluators; call add_evaluators first (or give "
                "every case the metrics it checks)"
            )
        if k < 1:
            raise MetricInputError(f"k must be >= 1, got {k}")
        attempts = k if attempts is None else attempts
        if attempts < k:
            raise MetricInputError(f"attempts must be >= k ({k}), got {attempts}")
        limit = asyncio.Semaphore(max(1, concurrency))
        engines = self._engines()
        # the agent's signature is read once, not on every attempt
        takes = _optional_parameters(agent_fn) if agent_fn is not None else frozenset()
        show = sys.stderr.isatty() if progress is None else progress
        with Progress(console=Console(stderr=True), disable=not show) as bar:
            task = bar.add_task(self.name, total=len(self.cases) * attempts)

            owners: dict[str, EvalCase] = {}

            async def attempt(case: EvalCase, index: int) -> RunResult:
                async with limit:
                    engine = engines[tuple(case.metrics or ())]
                    result = await self._attempt(
                        engine, agent_fn, case, index, takes, timeout, owners
                    )
                bar.advance(task)
                return result

            try:
                runs = await asyncio.gather(
                    *(attempt(case, index) for case in self.cases for index in range(attempts))
                )
            finally:
                for engine in engines.values():
                    await engine.aclose()
        ci_level, prior = options.get("ci_level", 0.95), options.get("prior", (1.0, 1.0))
        return self._report(list(runs), k, attempts, estimator, ci_level, prior)

    def _engines(self) -> dict[tuple[str, ...], Engine]:
        """One engine per set of metrics the cases ask for: the suite's evaluators, plus the
        metrics a case names that the suite does not already have."""
        engines: dict[tuple[str, ...], Engine] = {}
        have = {metric.name for metric in self.evaluators}
        for case in self.cases:
            key = tuple(case.metrics or ())
            if key in engines:
                continue
            extra = [name for name in dict.fromkeys(key) if name not in have]
            own, _ = resolve_metrics(extra, judge=self.judge, embedder=self.embedder)
            # attempts are independent runs, the same run each time for a deterministic
            # agent: each is scored
            engines[key] = Engine([*self.evaluators, *own], judge=self.judge, skip_repeats=False)
        return engines

    async def _attempt(
        self,
        engine: Engine,
        agent_fn: AgentFn | None,
        case: EvalCase,
        index: int,
        takes: frozenset[str],
        timeout: float | None,
        owners: dict[str, EvalCase],
    ) -> RunResult:
        """One attempt of ``case``, scored. ``owners``: the case each trace the agent
        returned so far was returned for (a trace is the run of one case)."""
        scored = case
        if agent_fn is not None and "conversation" not in takes and _follows_up(case):
            return _not_run(case, index, "out_of_context", _OUT_OF_CONTEXT)
        if agent_fn is not None and "resume" not in takes and case.resume:
            return _not_run(case, index, "out_of_context", _NO_RESUME)
        if agent_fn is not None:
            arguments: dict[str, Any] = {}
            if "conversation" in takes:
                arguments["conversation"] = list(case.conversation or [])
            if "resume" in takes:
                arguments["resume"] = list(case.resume or [])

            async def call() -> Any:
                produced = (
                    await agent_fn(case.input, **arguments)
                    if inspect.iscoroutinefunction(agent_fn)
                    else await _on_daemon_thread(agent_fn, case.input, arguments)
                )
                return await produced if inspect.isawaitable(produced) else produced

            try:
                produced = await asyncio.wait_for(call(), timeout)
            except TimeoutError:
                why = f"the agent did not return within {timeout:g} s"
                return _not_run(case, index, "agent_timeout", why, f"timed out after {timeout:g} s")
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                return _not_run(case, index, "agent_error", f"the agent raised {error}", error)
            run = produced.trace if isinstance(produced, EvalCase) else produced
            if isinstance(run, Trace) and owners.setdefault(run.id, case) is not case:
                # scored as this case's run, another case's pass would be this one's
                why = _ANOTHER_CASES_RUN.format(trace=run.id, case=owners[run.id].id)
                return _not_run(case, index, "agent_error", why, "another case's run")
            scored = _with_output(case, produced)
        # runs of a case are independent attempts, not a session: score each on its own
        alone = (
            scored.model_copy(
                update={"trace": scored.trace.model_copy(update={"session_id": None})}
            )
            if scored.trace is not None and scored.trace.session_id
            else scored
        )
        (outcome,) = await engine.score([alone])
        verdict, reason = attempt_outcome(scored, outcome.results)
        status = scored.trace.status if scored.trace is not None else None
        return RunResult(
            case_id=case.id,
            attempt=index,
            passed=verdict == "passed",
            outcome=verdict,
            reason=reason,
            status=str(status) if status is not None else None,
            output=scored.actual_output,
            results=outcome.results,
        )

    def _report(
        self,
        runs: list[RunResult],
        k: int,
        attempts: int,
        estimator: Estimator,
        ci_level: float,
        prior: tuple[float, float],
    ) -> SuiteReport:
        summary = ResultSummary()
        cases: list[CaseReport] = []
        for position, (case, label) in enumerate(zip(self.cases, _labels(self.cases), strict=True)):
            own = runs[position * attempts : (position + 1) * attempts]
            for run in own:
                summary.add(run.results)
            passes = sum(run.passed for run in own)
            cases.append(
                CaseReport(
                    case_id=case.id,
                    label=label,
                    input=case.input,
                    runs=own,
                    passes=passes,
                    estimate=estimate_pass_k(
                        attempts, passes, k, estimator=estimator, prior=prior, ci_level=ci_level
                    ),
                    metadata=case.metadata,
                    definition=case_definition(case),
                )
            )
        total_passes = sum(case.passes for case in cases)
        mean = mean_pass_k([case.estimate for case in cases])
        return SuiteReport(
            name=self.name,
            k=k,
            estimator=estimator,
            attempts=attempts,
            cases=cases,
            metrics=summary.as_dicts(),
            pass_at_k=mean.pass_at_k_mean,
            pass_pow_k=mean.pass_pow_k_mean,
            estimate_pass_at_k=mean.pass_at_k,
            estimate_pass_pow_k=mean.pass_pow_k,
            mean=mean,
            pooled=estimate_pass_k(
                len(runs), total_passes, k, estimator="plugin", prior=prior, ci_level=ci_level
            ),
        )
