"""A suite run against a saved baseline: which cases credibly got worse."""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from .._errors import MetricInputError
from ._suite import CaseReport, SuiteReport

__all__ = [
    "BaselineComparison",
    "CaseComparison",
    "compare_to_baseline",
    "drop_probability",
    "unflaggable_baseline",
]

DEFAULT_MAX_REGRESSION_PROB = 0.95
"""A case fails the comparison when the probability that its success rate dropped exceeds
this: 9/10 → 3/10 does (265/266 ≈ 0.996), 9/10 → 8/10 does not (94/133 ≈ 0.707)."""


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def drop_probability(
    baseline: tuple[int, int], now: tuple[int, int], *, prior: tuple[float, float] = (1.0, 1.0)
) -> float:
    """The posterior probability that a case's success rate is lower now than in the baseline.

    ``baseline`` and ``now`` are (passes, attempts). Each rate has the posterior
    Beta(prior_α + passes, prior_β + attempts − passes), independently; the result is
    P(p_now < p_baseline), computed exactly: with X ~ Beta(a₁, b₁) (baseline) and
    Y ~ Beta(a₂, b₂) (now) and a₁ a whole number,
    P(X > Y) = Σ_{i<a₁} B(a₂+i, b₁+b₂) / ((b₁+i) · B(1+i, b₁) · B(a₂, b₂)).
    A prior whose α is not a whole number is integrated numerically instead.
    """
    for label, (passes, attempts) in (("baseline", baseline), ("now", now)):
        if attempts < 1 or not 0 <= passes <= attempts:
            raise MetricInputError(
                f"{label}: passes must be between 0 and attempts (>= 1), got {passes}/{attempts}"
            )
    if min(prior) <= 0 or not all(math.isfinite(p) for p in prior):
        raise MetricInputError(f"prior parameters must be positive and finite, got {prior}")
    a1, b1 = prior[0] + baseline[0], prior[1] + baseline[1] - baseline[0]
    a2, b2 = prior[0] + now[0], prior[1] + now[1] - now[0]
    if float(a1).is_integer():
        total = sum(
            math.exp(
                _log_beta(a2 + i, b1 + b2)
                - math.log(b1 + i)
                - _log_beta(1 + i, b1)
                - _log_beta(a2, b2)
            )
            for i in range(int(a1))
        )
        return min(1.0, max(0.0, total))
    from scipy import integrate, stats

    # P(X > Y) = ∫ f_X(x) F_Y(x) dx
    value, _ = integrate.quad(
        lambda x: stats.beta.pdf(x, a1, b1) * stats.beta.cdf(x, a2, b2), 0.0, 1.0
    )
    return min(1.0, max(0.0, float(value)))


class CaseComparison(BaseModel):
    """One case now and in the baseline."""

    case_id: str
    label: str
    baseline_passes: int
    baseline_attempts: int
    passes: int
    attempts: int
    drop_probability: float
    """P(success rate now < success rate in the baseline), from the two Beta posteriors."""
    regressed: bool
    """``drop_probability`` exceeds the comparison's ``max_regression_prob``, and the case
    was checked as in the baseline (``checks_changed`` is empty)."""
    checks_changed: list[str] = Field(default_factory=list)
    """How what decides an attempt's pass differs from the baseline's, e.g.
    ``["trajectory_match added", "expected_tool_calls changed"]``: a metric added or
    removed, its version (a judge metric's includes its prompt's), threshold or judge
    model, the case's input or definition. The two rates then
    measure different things, so the case is not compared (``regressed`` is false) and
    counts as new to the baseline."""


class BaselineComparison(BaseModel):
    """Every case of a run that the baseline also ran, compared."""

    max_regression_prob: float
    cases: list[CaseComparison]
    new: list[str] = Field(default_factory=list)
    """Cases the baseline did not run (labels)."""
    dropped: list[str] = Field(default_factory=list)
    """Cases of the baseline this run did not run (labels)."""

    @property
    def regressions(self) -> list[CaseComparison]:
        """The cases that credibly got worse."""
        return [case for case in self.cases if case.regressed]

    @property
    def rechecked(self) -> list[CaseComparison]:
        """The cases checked otherwise than in the baseline (``checks_changed``): the
        baseline cannot judge them."""
        return [case for case in self.cases if case.checks_changed]


def changed_checks(baseline: CaseReport, now: CaseReport) -> list[str]:
    """How what decides whether an attempt of the case passes differs between ``baseline``
    and ``now`` (see :attr:`CaseComparison.checks_changed`); empty when it does not. The
    metrics are compared when an attempt was scored on each side (a side whose every
    attempt raised says nothing of its checks); the definitions when both reports keep
    one."""
    changes: list[str] = []
    before, after = baseline.checks(), now.checks()
    if before and after:
        changes += [f"{name} added" for name in after if name not in before]
        changes += [f"{name} removed" for name in before if name not in after]
        for name in (name for name in after if name in before):
            (old_version, old_threshold, old_judge) = before[name]
            (version, threshold, judge) = after[name]
            if old_version != version:
                changes.append(f"{name} version {old_version} → {version}")
            if old_threshold != threshold:
                changes.append(f"{name} threshold {old_threshold:g} → {threshold:g}")
            if old_judge is not None and judge is not None and old_judge != judge:
                changes.append(f"{name} judge {old_judge} → {judge}")
    if to_jsonable_python(baseline.input, fallback=str) != to_jsonable_python(
        now.input, fallback=str
    ):
        changes.append("input changed")
    if baseline.definition is not None and now.definition is not None:
        changes += [
            f"{field} changed"
            for field in sorted(baseline.definition.keys() | now.definition.keys())
            if baseline.definition.get(field) != now.definition.get(field)
        ]
    return changes


def compare_to_baseline(
    report: SuiteReport,
    baseline: SuiteReport,
    *,
    max_regression_prob: float = DEFAULT_MAX_REGRESSION_PROB,
    prior: tuple[float, float] = (1.0, 1.0),
) -> BaselineComparison:
    """Compare each case's success rate with the baseline's (cases matched by id): a case
    regressed when the probability that its rate dropped exceeds ``max_regression_prob``, so
    a flaky case does not fail by chance and a real drop does. A case checked otherwise now
    (another metric, metric version or threshold, input or expectation) is not compared:
    its rates measure different things (:attr:`BaselineComparison.rechecked`)."""
    if not 0.0 < max_regression_prob < 1.0:
        raise MetricInputError(
            f"max_regression_prob must be between 0 and 1, got {max_regression_prob}"
        )
    before = {case.case_id: case for case in baseline.cases}
    compared: list[CaseComparison] = []
    for case in report.cases:
        old = before.get(case.case_id)
        if old is None:
            continue
        probability = drop_probability(
            (old.passes, len(old.runs)), (case.passes, len(case.runs)), prior=prior
        )
        changed = changed_checks(old, case)
        compared.append(
            CaseComparison(
                case_id=case.case_id,
                label=case.label,
                baseline_passes=old.passes,
                baseline_attempts=len(old.runs),
                passes=case.passes,
                attempts=len(case.runs),
                drop_probability=probability,
                regressed=probability > max_regression_prob and not changed,
                checks_changed=changed,
            )
        )
    now = {case.case_id for case in report.cases}
    return BaselineComparison(
        max_regression_prob=max_regression_prob,
        cases=compared,
        new=[case.label for case in report.cases if case.case_id not in before],
        dropped=[case.label for case in baseline.cases if case.case_id not in now],
    )


MOST_ATTEMPTS_TRIED = 1000
"""The most attempts per case :func:`unflaggable_baseline` looks through for what it needs."""


def unflaggable_baseline(
    baseline: SuiteReport,
    case_ids: Iterable[str],
    attempts: int,
    *,
    max_regression_prob: float = DEFAULT_MAX_REGRESSION_PROB,
    prior: tuple[float, float] = (1.0, 1.0),
) -> str | None:
    """Why comparing a run of ``attempts`` attempts per case with ``baseline`` can flag no
    regression, whatever the agent does now: every case of ``case_ids`` that the baseline
    passed at least once has too few attempts, there and now, for even a drop to failing
    every attempt to be credible (1 of 1 then, 0 of 1 now: P(drop) = 5/6). ``None`` when a
    case can be flagged, or when the baseline passed none of them (no rate to drop from)."""
    wanted = set(case_ids)
    passed = [
        (case.passes, len(case.runs))
        for case in baseline.cases
        if case.case_id in wanted and case.passes > 0
    ]
    if not passed:
        return None

    def worst(now: int) -> tuple[float, tuple[int, int]]:
        """The highest drop probability a run of ``now`` failed attempts can reach."""
        return max((drop_probability(old, (0, now), prior=prior), old) for old in passed)

    reach, (passes, runs) = worst(attempts)
    if reach > max_regression_prob:
        return None
    needed = next(
        (
            n
            for n in range(attempts + 1, MOST_ATTEMPTS_TRIED + 1)
            if worst(n)[0] > max_regression_prob
        ),
        None,
    )
    remedy = (
        f"give --attempts {needed} or more"
        if needed is not None
        else f"more than {MOST_ATTEMPTS_TRIED} attempts would be needed"
    )
    return (
        f"--baseline can flag no regression with {attempts} attempt(s) per case: a case "
        f"that passed {passes} of its {runs} baseline attempt(s) and fails every attempt now "
        f"has P(drop) {reach:.3f}, not over --max-regression-prob {max_regression_prob:g}, "
        f"so an agent that fails every case would pass; {remedy} (or save a baseline with "
        "more attempts)"
    )
