"""pass@k and pass^k: plug-in and unbiased estimators, Bayesian means and credible intervals."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .._errors import MetricInputError

__all__ = [
    "Estimator",
    "MeanPassK",
    "PassKEstimate",
    "best_pass_k",
    "estimate_pass_k",
    "mean_pass_k",
    "pass_at_k",
    "pass_pow_k",
]

Estimator = Literal["plugin", "unbiased"]


def _check(n: int, c: int, k: int, estimator: str) -> None:
    if n < 1:
        raise MetricInputError(f"n (attempts) must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise MetricInputError(f"c (successes) must be between 0 and n={n}, got {c}")
    if k < 1:
        raise MetricInputError(f"k must be >= 1, got {k}")
    if estimator not in ("plugin", "unbiased"):
        raise MetricInputError(f"estimator must be 'plugin' or 'unbiased', got {estimator!r}")
    if estimator == "unbiased" and k > n:
        raise MetricInputError(
            f"the unbiased estimator needs k <= n (k={k}, n={n}); run more attempts or use "
            "estimator='plugin'"
        )


def _ratio_product(top: int, bottom: int, k: int) -> float:
    """C(top, k) / C(bottom, k) as a product of k ratios (no factorials, no overflow)."""
    if top < k:
        return 0.0
    return math.prod((top - i) / (bottom - i) for i in range(k))


def pass_at_k(n: int, c: int, k: int, *, estimator: Estimator = "plugin") -> float:
    """Probability that at least one of k attempts succeeds, from c successes in n attempts.

    ``plugin``: 1 − (1 − c/n)^k. ``unbiased``: 1 − C(n−c, k) / C(n, k) (needs k ≤ n).
    """
    _check(n, c, k, estimator)
    if estimator == "unbiased":
        return 1.0 - _ratio_product(n - c, n, k)
    if c == 0:
        return 0.0
    if c == n:
        return 1.0
    return 1.0 - (1.0 - c / n) ** k


def pass_pow_k(n: int, c: int, k: int, *, estimator: Estimator = "plugin") -> float:
    """Probability that all k attempts succeed, from c successes in n attempts.

    ``plugin``: (c/n)^k. ``unbiased``: C(c, k) / C(n, k) (needs k ≤ n).
    """
    _check(n, c, k, estimator)
    if estimator == "unbiased":
        return _ratio_product(c, n, k)
    if c == 0:
        return 0.0
    if c == n:
        return 1.0
    return (c / n) ** k


class PassKEstimate(BaseModel):
    """pass@k and pass^k for one conversation or suite, with Bayesian credible intervals.

    The posterior of the success rate is Beta(prior_alpha + c, prior_beta + n − c). Means are
    exact: E[p^k] = ∏_{i<k} (α+i)/(α+β+i), E[pass@k] = 1 − ∏_{i<k} (β+i)/(α+β+i). Both quantities
    are monotone in p, so the equal-tailed interval and the median map through the Beta
    quantiles. The median always lies inside the interval; the mean need not (with few
    attempts and a large k, p^k is so skewed that its mean falls past a 95% bound), so the
    median is the figure to show beside the interval.
    """

    model_config = ConfigDict(frozen=True)

    n: int
    c: int
    k: int
    estimator: Estimator
    pass_at_k: float
    pass_pow_k: float
    posterior_alpha: float
    posterior_beta: float
    pass_at_k_mean: float
    pass_pow_k_mean: float
    pass_at_k_median: float
    """The posterior median of pass@k: inside ``pass_at_k_ci`` by construction."""
    pass_pow_k_median: float
    """The posterior median of pass^k: inside ``pass_pow_k_ci`` by construction."""
    pass_at_k_ci: tuple[float, float]
    pass_pow_k_ci: tuple[float, float]
    ci_level: float


def _beta_power_moment(alpha: float, beta: float, power: int) -> float:
    """E[p^power] for p ~ Beta(alpha, beta): ∏_{i<power} (α+i)/(α+β+i)."""
    return math.prod((alpha + i) / (alpha + beta + i) for i in range(power))


def best_pass_k(
    attempts: int, k: int, prior: tuple[float, float] = (1.0, 1.0)
) -> tuple[float, float]:
    """The posterior means of pass@k and pass^k after ``attempts`` attempts that all passed:
    the most a suite's headline (:class:`MeanPassK`) can show with that many attempts per
    case, and so the most a bound on it can ask."""
    alpha, beta = prior[0] + attempts, prior[1]
    return 1.0 - _beta_power_moment(beta, alpha, k), _beta_power_moment(alpha, beta, k)


def estimate_pass_k(
    n: int,
    c: int,
    k: int,
    *,
    estimator: Estimator = "plugin",
    prior: tuple[float, float] = (1.0, 1.0),
    ci_level: float = 0.95,
) -> PassKEstimate:
    """Point estimates (``estimator``) plus the Bayesian posterior means and credible intervals."""
    _check(n, c, k, estimator)
    if not 0.0 < ci_level < 1.0:
        raise MetricInputError(f"ci_level must be between 0 and 1, got {ci_level}")
    if min(prior) <= 0 or not all(math.isfinite(value) for value in prior):
        raise MetricInputError(f"prior parameters must be positive and finite, got {prior}")
    alpha, beta = prior[0] + c, prior[1] + n - c
    tail = (1.0 - ci_level) / 2.0
    # the Beta quantile is the inverse regularised incomplete beta function; importing it
    # from scipy.special (here, when first needed) keeps scipy.stats out of import time
    from scipy.special import betaincinv

    q_lo, q_mid, q_hi = (float(betaincinv(alpha, beta, q)) for q in (tail, 0.5, 1.0 - tail))
    return PassKEstimate(
        n=n,
        c=c,
        k=k,
        estimator=estimator,
        pass_at_k=pass_at_k(n, c, k, estimator=estimator),
        pass_pow_k=pass_pow_k(n, c, k, estimator=estimator),
        posterior_alpha=alpha,
        posterior_beta=beta,
        pass_at_k_mean=1.0 - _beta_power_moment(beta, alpha, k),
        pass_pow_k_mean=_beta_power_moment(alpha, beta, k),
        pass_at_k_median=1.0 - (1.0 - q_mid) ** k,
        pass_pow_k_median=q_mid**k,
        pass_at_k_ci=(1.0 - (1.0 - q_lo) ** k, 1.0 - (1.0 - q_hi) ** k),
        pass_pow_k_ci=(q_lo**k, q_hi**k),
        ci_level=ci_level,
    )


class MeanPassK(BaseModel):
    """The mean over cases of each case's pass@k and pass^k, with credible intervals for
    those two means (not for a pooled success rate).

    The points are the means of the cases' estimates (by the chosen estimator). The
    intervals come from the cases' independent Beta posteriors: the mean and variance of
    each case's pass@k and pass^k are exact (Beta moments), the variance of their mean is
    their sum over n², and the interval is the normal one around the posterior mean,
    clipped to [0, 1].
    """

    model_config = ConfigDict(frozen=True)

    cases: int
    k: int
    pass_at_k: float
    pass_pow_k: float
    pass_at_k_mean: float
    pass_pow_k_mean: float
    pass_at_k_ci: tuple[float, float]
    pass_pow_k_ci: tuple[float, float]
    ci_level: float


def mean_pass_k(estimates: list[PassKEstimate]) -> MeanPassK:
    """Average per-case estimates (one k and ci_level); see :class:`MeanPassK`."""
    if not estimates:
        raise MetricInputError("mean_pass_k needs at least one case's estimate")
    k, level, count = estimates[0].k, estimates[0].ci_level, len(estimates)
    z = NormalDist().inv_cdf(0.5 + level / 2.0)

    def interval(means: list[float], variances: list[float]) -> tuple[float, tuple[float, float]]:
        centre = sum(means) / count
        spread = z * math.sqrt(max(0.0, sum(variances))) / count
        return centre, (max(0.0, centre - spread), min(1.0, centre + spread))

    pow_means, pow_vars, at_means, at_vars = [], [], [], []
    for e in estimates:
        a, b = e.posterior_alpha, e.posterior_beta
        first, second = _beta_power_moment(a, b, k), _beta_power_moment(a, b, 2 * k)
        pow_means.append(first)
        pow_vars.append(second - first**2)
        # pass@k = 1 − (1 − p)^k, and 1 − p ~ Beta(β, α)
        miss, miss2 = _beta_power_moment(b, a, k), _beta_power_moment(b, a, 2 * k)
        at_means.append(1.0 - miss)
        at_vars.append(miss2 - miss**2)
    at_mean, at_ci = interval(at_means, at_vars)
    pow_mean, pow_ci = interval(pow_means, pow_vars)
    return MeanPassK(
        cases=count,
        k=k,
        pass_at_k=sum(e.pass_at_k for e in estimates) / count,
        pass_pow_k=sum(e.pass_pow_k for e in estimates) / count,
        pass_at_k_mean=at_mean,
        pass_pow_k_mean=pow_mean,
        pass_at_k_ci=at_ci,
        pass_pow_k_ci=pow_ci,
        ci_level=level,
    )
