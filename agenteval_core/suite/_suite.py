"""EvalSuite: run an agent k times per case, score every run, report pass@k and pass^k."""

from __future__ import annotations

import asyncio
import inspect
import io
import json
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from .._errors import MetricInputError
from ..engine._engine import Engine, resolve_metrics
from ..engine._summary import ResultSummary
from ..metrics._protocol import Metric
from ..metrics._statistics import (
    Estimator,
    MeanPassK,
    PassKEstimate,
    estimate_pass_k,
    mean_pass_k,
)
from ..schema._results import MetricResult
from ..schema._trace import EvalCase, Trace

__all__ = ["AgentFn", "CaseReport", "EvalSuite", "RunResult", "SuiteReport"]

AgentFn = Callable[[Any], "str | Trace | EvalCase | Awaitable[str | Trace | EvalCase]"]
"""An agent under test: takes the case input, returns its final output, a Trace or an EvalCase
(sync or async)."""


class RunResult(BaseModel):
    """One attempt of one case."""

    case_id: str
    attempt: int
    passed: bool
    """Every metric that scored succeeded and none failed with an error."""
    output: Any = None
    error: str | None = None
    """The agent's exception, if it raised."""
    results: list[MetricResult] = Field(default_factory=list)


class CaseReport(BaseModel):
    """All attempts of one case, with pass@k / pass^k over them."""

    case_id: str
    input: Any = None
    runs: list[RunResult]
    passes: int
    estimate: PassKEstimate


class SuiteReport(BaseModel):
    """A suite run: per-case estimates, per-metric aggregates and suite-level figures.

    ``pass_at_k`` / ``pass_pow_k`` are the means over cases of each case's estimate, and
    ``mean`` gives them with credible intervals for those same means. ``pooled`` treats every
    run of every case as one Bernoulli sample: another quantity (a suite-wide success rate),
    kept for reference.
    """

    name: str
    k: int
    estimator: Estimator
    cases: list[CaseReport]
    metrics: list[dict[str, Any]]
    pass_at_k: float
    pass_pow_k: float
    mean: MeanPassK
    attempts: int
    pooled: PassKEstimate

    def summary(self) -> str:
        """A plain-text summary table (also what ``str(report)`` shows)."""
        console = Console(width=110, record=True, file=io.StringIO())
        cases = Table(title=f"{self.name}: {len(self.cases)} cases × {self.attempts} attempts")
        level = f"{round(self.pooled.ci_level * 100)}%"
        for column in ("case", "passes", f"pass@{self.k}", f"pass^{self.k}", f"{level} CI pass^k"):
            cases.add_column(column)
        for case in self.cases:
            low, high = case.estimate.pass_pow_k_ci
            cases.add_row(
                case.case_id,
                f"{case.passes}/{len(case.runs)}",
                f"{case.estimate.pass_at_k:.3f}",
                f"{case.estimate.pass_pow_k:.3f}",
                f"[{low:.3f}, {high:.3f}]",
            )
        console.print(cases)
        metrics = Table(title="metrics")
        for column in ("metric", "mean", "pass rate", "errors", "skipped"):
            metrics.add_column(column)
        for row in self.metrics:
            metrics.add_row(
                row["metric"],
                "-" if row["mean"] is None else f"{row['mean']:.3f}",
                "-" if row["pass_rate"] is None else f"{row['pass_rate']:.3f}",
                str(row["errors"]),
                str(row["skipped"]),
            )
        console.print(metrics)
        (at_lo, at_hi), (pow_lo, pow_hi) = self.mean.pass_at_k_ci, self.mean.pass_pow_k_ci
        console.print(
            f"suite (mean over cases): pass@{self.k} = {self.pass_at_k:.3f} "
            f"[{level} CI {at_lo:.3f}, {at_hi:.3f}], pass^{self.k} = {self.pass_pow_k:.3f} "
            f"[{level} CI {pow_lo:.3f}, {pow_hi:.3f}]"
        )
        return console.export_text()

    def __str__(self) -> str:
        return self.summary()

    def to_json(self, indent: int | None = 2) -> str:
        """The whole report as JSON."""
        return json.dumps(self.model_dump(mode="json"), indent=indent, default=str)


def _flatten(items: Iterable[Any]) -> list[Any]:
    flat: list[Any] = []
    for item in items:
        if isinstance(item, list | tuple):
            flat.extend(item)
        else:
            flat.append(item)
    return flat


def _with_output(case: EvalCase, produced: str | Trace | EvalCase) -> EvalCase:
    if isinstance(produced, EvalCase):
        return produced
    if isinstance(produced, Trace):
        return case.model_copy(update={"trace": produced, "actual_output": produced.output})
    trace = case.trace.model_copy(update={"output": produced}) if case.trace is not None else None
    return case.model_copy(update={"trace": trace, "actual_output": produced})


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

    def add_cases(self, *cases: EvalCase | Iterable[EvalCase]) -> EvalSuite:
        """Add cases (or lists of cases); returns the suite for chaining."""
        for case in _flatten(cases):
            if not isinstance(case, EvalCase):
                raise MetricInputError(
                    f"add_cases takes EvalCase objects, got {type(case).__name__}"
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
        self,
        agent_fn: AgentFn | None = None,
        k: int = 1,
        *,
        attempts: int | None = None,
        estimator: Estimator = "plugin",
        ci_level: float = 0.95,
        prior: tuple[float, float] = (1.0, 1.0),
        concurrency: int = 4,
        progress: bool | None = None,
    ) -> SuiteReport:
        """Run every case k times and score each run; see :meth:`arun`."""
        return asyncio.run(
            self.arun(
                agent_fn,
                k,
                attempts=attempts,
                estimator=estimator,
                ci_level=ci_level,
                prior=prior,
                concurrency=concurrency,
                progress=progress,
            )
        )

    async def arun(
        self,
        agent_fn: AgentFn | None = None,
        k: int = 1,
        *,
        attempts: int | None = None,
        estimator: Estimator = "plugin",
        ci_level: float = 0.95,
        prior: tuple[float, float] = (1.0, 1.0),
        concurrency: int = 4,
        progress: bool | None = None,
    ) -> SuiteReport:
        """Run every case ``attempts`` times (default k; at most ``concurrency`` at once) and score each run.

        ``agent_fn`` gets the case input and returns the final output (the case's recorded
        trace is kept with that output), a ``Trace`` or an ``EvalCase``; it may be async.
        Without ``agent_fn`` the cases are scored as they are. An agent that raises is a
        failed run with its error recorded. A run passes when every metric that scored
        succeeded and none ended in an error; skipped metrics do not count.
        pass@k and pass^k per case come from its c passes in n = ``attempts`` runs (n ≥ k;
        more attempts than k make the unbiased estimator meaningful).
        ``progress`` shows a bar on stderr (default: when stderr is a terminal).
        """
        if not self.cases:
            raise MetricInputError(f"suite {self.name!r} has no cases; call add_cases first")
        if not self.evaluators:
            raise MetricInputError(
                f"suite {self.name!r} has no evaluators; call add_evaluators first"
            )
        if k < 1:
            raise MetricInputError(f"k must be >= 1, got {k}")
        attempts = k if attempts is None else attempts
        if attempts < k:
            raise MetricInputError(f"attempts must be >= k ({k}), got {attempts}")
        limit = asyncio.Semaphore(max(1, concurrency))
        engine = Engine(self.evaluators, judge=self.judge)
        show = sys.stderr.isatty() if progress is None else progress
        with Progress(console=Console(stderr=True), disable=not show) as bar:
            task = bar.add_task(self.name, total=len(self.cases) * attempts)

            async def attempt(case: EvalCase, index: int) -> RunResult:
                async with limit:
                    result = await self._attempt(engine, agent_fn, case, index)
                bar.advance(task)
                return result

            runs = await asyncio.gather(
                *(attempt(case, index) for case in self.cases for index in range(attempts))
            )
        return self._report(list(runs), k, attempts, estimator, ci_level, prior)

    async def _attempt(
        self, engine: Engine, agent_fn: AgentFn | None, case: EvalCase, index: int
    ) -> RunResult:
        scored = case
        if agent_fn is not None:
            try:
                produced = (
                    await agent_fn(case.input)
                    if inspect.iscoroutinefunction(agent_fn)
                    else await asyncio.to_thread(agent_fn, case.input)
                )
                if inspect.isawaitable(produced):
                    produced = await produced
                scored = _with_output(case, produced)
            except Exception as exc:
                return RunResult(
                    case_id=case.id,
                    attempt=index,
                    passed=False,
                    error=f"{type(exc).__name__}: {exc}",
                )
        # runs of a case are independent attempts, not a session: score each on its own
        alone = (
            scored.model_copy(
                update={"trace": scored.trace.model_copy(update={"session_id": None})}
            )
            if scored.trace is not None and scored.trace.session_id
            else scored
        )
        (outcome,) = await engine.score([alone])
        results = outcome.results
        passed = not outcome.failing()
        return RunResult(
            case_id=case.id,
            attempt=index,
            passed=passed,
            output=scored.actual_output,
            results=results,
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
        for position, case in enumerate(self.cases):
            own = runs[position * attempts : (position + 1) * attempts]
            for run in own:
                summary.add(run.results)
            passes = sum(run.passed for run in own)
            cases.append(
                CaseReport(
                    case_id=case.id,
                    input=case.input,
                    runs=own,
                    passes=passes,
                    estimate=estimate_pass_k(
                        attempts, passes, k, estimator=estimator, prior=prior, ci_level=ci_level
                    ),
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
            pass_at_k=mean.pass_at_k,
            pass_pow_k=mean.pass_pow_k,
            mean=mean,
            pooled=estimate_pass_k(
                len(runs), total_passes, k, estimator="plugin", prior=prior, ci_level=ci_level
            ),
        )
