"""pytest integration: ``assert_eval``, ``assert_pass_k``, ``regression_cases`` (one test per
regression case), the ``agenteval_evaluator`` and ``agenteval_k_runs`` fixtures, and a results
report.

Installed with agenteval (entry point ``pytest11``), so no ``conftest.py`` is needed::

    from agenteval_core.pytest_plugin import assert_eval

    def test_agent_calls_search(trace):
        assert_eval(trace, ["tool_call_loops", "coherence"])

``pytest --agenteval-report results.json`` writes every result asserted in the session.

pytest loads this plugin in every run of a project where agenteval is installed, so it
imports nothing of agenteval's until a helper or fixture is used.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .metrics._protocol import Metric
    from .metrics._statistics import Estimator
    from .online._evaluator import OnlineEvaluator
    from .schema._results import MetricResult
    from .schema._trace import EvalCase, Trace
    from .suite._cases import RegressionCase
    from .suite._suite import AgentFn, SuiteReport

__all__ = ["assert_eval", "assert_pass_k", "regression_cases"]

_RECORDED: list[dict[str, Any]] = []


def _describe(result: MetricResult) -> str:
    if result.score is None:
        return f"{result.name}: no score — {result.error or result.reason}"
    return f"{result.name}: score {result.score:.3f} < threshold {result.threshold:g} — {result.reason}"


def assert_eval(
    case: EvalCase | Trace,
    metrics: Sequence[str | Metric],
    *,
    judge: Any = None,
    embedder: Any = None,
    allow_skipped: bool = False,
    **options: Any,
) -> list[MetricResult]:
    """Score ``case`` with ``metrics`` (names or instances) through the same engine as
    replay and online scoring, and fail, naming every reason, when the run did not complete
    (as a suite's attempt fails: ``interrupted``, a pause for a human, has not failed) or
    ended in the provider's refusal (unless the case has ``allow_refusal``), when
    a metric fails its threshold or errors, or when a metric is skipped: a check that did
    not run (``tool_call_accuracy`` without ``expected_tool_calls``) is never a pass. With
    ``allow_skipped=True`` a skipped metric is accepted, as long as some metric scored the
    run; a run that ended in a refusal the case allows passes whatever the metrics skipped.
    ``judge`` and ``embedder`` go to the metrics that take them; ``options`` to every
    metric built by name. Returns the results."""
    from ._errors import MetricInputError
    from .engine._engine import Engine
    from .schema._trace import EvalCase
    from .suite._suite import attempt_outcome

    engine = Engine(metrics, judge=judge, embedder=embedder, **options)
    if engine.session_metrics:
        raise MetricInputError(
            f"assert_eval scores one trace; {engine.session_metrics[0].name!r} is a session "
            "metric (use replay or OnlineEvaluator for sessions)"
        )
    (outcome,) = engine.score_sync([case])
    _RECORDED.extend(r.model_dump(mode="json") for r in outcome.results)
    verdict, why = attempt_outcome(EvalCase.of(case), outcome.results)
    ended = verdict in ("incomplete", "refused")  # says why in itself
    problems = [why] if ended else []
    problems += [_describe(r) for r in outcome.failing()]
    skipped = [r for r in outcome.results if r.skipped and r.error is None]
    # a pass no metric scored: the run ended in a refusal the case allows, nothing to check
    refusal_allowed = verdict == "passed" and all(r.score is None for r in outcome.results)
    if (
        not (ended or refusal_allowed)
        and skipped
        and (not allow_skipped or verdict == "not_scored")
    ):
        problems += [f"{r.name}: skipped — {r.reason}" for r in skipped]
        problems.append(
            "a skipped metric checked nothing: give what it needs (an EvalCase with its "
            "expectation), leave it out, or pass allow_skipped=True"
            if verdict != "not_scored"
            else "no metric scored the run"
        )
    if problems:
        raise AssertionError("agenteval: " + "; ".join(problems))
    return outcome.results


def assert_pass_k(
    agent: AgentFn,
    cases: EvalCase | RegressionCase | Sequence[EvalCase | RegressionCase],
    metrics: Sequence[str | Metric] = (),
    *,
    k: int,
    judge: Any = None,
    attempts: int | None = None,
    min_pass_at_k: float | None = None,
    min_pass_pow_k: float | None = None,
    estimator: Estimator = "plugin",
    timeout: float | None = None,
) -> SuiteReport:
    """Run ``agent`` on each case ``attempts`` times (default k) and fail when the suite's
    pass@k or pass^k (the headline: the posterior mean of the mean over cases, see
    :class:`SuiteReport`) falls below the given bounds, or, given neither bound, when any
    attempt failed; the message shows each case's passes and why its attempts failed.
    Attempts pass as in :meth:`EvalSuite.arun`: a run that did not complete, or that no
    metric scored, is a failure; so is one whose agent call took longer than ``timeout``
    seconds (default: no limit). Each case is scored by ``metrics`` and by the checks it
    names itself (a regression case's ``metrics``)."""
    from ._errors import MetricInputError
    from .suite._suite import EvalSuite, missed_bounds, unreachable_bounds, without_bounds

    unreachable = unreachable_bounds(
        k,
        attempts or k,
        min_pass_at_k,
        min_pass_pow_k,
        names=("min_pass_at_k", "min_pass_pow_k", "attempts"),
    )
    if unreachable:  # before the agent runs: every attempt would be spent for nothing
        raise MetricInputError("agenteval: " + "; ".join(unreachable))
    suite = EvalSuite("pytest", judge=judge).add_cases(cases).add_evaluators(*metrics)
    report = suite.run(
        agent, k=k, attempts=attempts, estimator=estimator, progress=False, timeout=timeout
    )
    for case in report.cases:
        _RECORDED.extend(r.model_dump(mode="json") for run in case.runs for r in run.results)
    problems = missed_bounds(
        report, min_pass_at_k, min_pass_pow_k, names=("min_pass_at_k", "min_pass_pow_k")
    )
    if min_pass_at_k is None and min_pass_pow_k is None:
        problems += without_bounds(report, "min_pass_at_k or min_pass_pow_k")
    if problems:
        passes = ", ".join(f"{c.label}: {c.passes}/{len(c.runs)}" for c in report.cases)
        why = sorted({run.reason for c in report.cases for run in c.runs if not run.passed})
        raise AssertionError(
            f"agenteval: {'; '.join(problems)} (passes per case: {passes}); "
            f"attempts failed because: {' | '.join(why[:5])}"
        )
    return report


def regression_cases(path: str | Path) -> list[Any]:
    """The cases of a cases file (``agenteval cases`` output) as pytest parameters: one test
    per case, named by the case's id::

        @pytest.mark.parametrize("case", regression_cases("tests/regressions.jsonl"))
        def test_regression(case):
            assert_pass_k(my_agent, case, k=1, attempts=3, min_pass_pow_k=0.5)
    """
    from .suite._cases import read_cases
    from .suite._suite import case_label

    return [pytest.param(case, id=case_label(case)) for case in read_cases(path)]


@pytest.fixture
def agenteval_evaluator(tmp_path: Path) -> Iterator[OnlineEvaluator]:
    """An evaluator that captures to the test's temporary directory; give it to the
    framework's handler, run the agent, and ``agenteval_evaluator.captured()`` returns the
    runs' traces for :func:`assert_eval`. Closed after the test."""
    from .online._evaluator import OnlineEvaluator

    evaluator = OnlineEvaluator(capture=tmp_path / "agenteval-capture.jsonl", log=False)
    yield evaluator
    evaluator.close()


@pytest.fixture
def agenteval_k_runs() -> Callable[..., SuiteReport]:
    """:func:`assert_pass_k` as a fixture."""
    return assert_pass_k


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--agenteval-report",
        metavar="PATH",
        help="write every agenteval result asserted in this session to PATH (JSON)",
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    _RECORDED.clear()  # a report covers its own session only


_WORKER_RESULTS = "agenteval_results"
"""The key under which a pytest-xdist worker hands its results to the controller."""


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:  # a pytest-xdist worker: the controller writes the report
        worker_output[_WORKER_RESULTS] = json.dumps(_RECORDED)
        return
    path = session.config.getoption("--agenteval-report", default=None)
    if path:
        Path(path).write_text(json.dumps({"results": _RECORDED}, indent=2), encoding="utf-8")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist: a worker is done; its results join the controller's report (before
    the controller's ``pytest_sessionfinish``, which waits for every worker)."""
    handed = getattr(node, "workeroutput", {}).get(_WORKER_RESULTS)
    if handed:
        _RECORDED.extend(json.loads(handed))
