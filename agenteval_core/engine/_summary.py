"""Per-metric aggregates over a run: what replay, EvalSuite and the report summarise."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .._errors import ErrorKind
from ..schema._results import MetricResult

__all__ = ["MetricSummary", "ResultSummary"]


@dataclass
class MetricSummary:
    """Aggregate of one metric's results: None scores are left out of the mean and counted."""

    name: str
    count: int = 0
    scored: int = 0
    total: float = 0.0
    passed: int = 0
    errors: int = 0
    skipped: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    reasons: Counter[str] = field(default_factory=Counter)
    """How often each skip reason and error text occurred: at most ``MAX_REASONS`` distinct
    texts, the rest counted under ``OTHER_REASONS`` (a long replay's errors can each
    differ)."""
    error_kinds: Counter[str] = field(default_factory=Counter)
    """Errors by :class:`~agenteval_core.ErrorKind` (``metadata["error_kind"]``)."""

    MAX_REASONS: ClassVar[int] = 100
    """Distinct reasons kept per metric."""
    OTHER_REASONS: ClassVar[str] = "(other reasons)"
    """Where reasons past the first ``MAX_REASONS`` are counted."""

    @property
    def mean(self) -> float | None:
        return self.total / self.scored if self.scored else None

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.scored if self.scored else None

    def add(self, result: MetricResult) -> None:
        """Count one result of this metric."""
        self.count += 1
        self.input_tokens += result.input_tokens or 0
        self.output_tokens += result.output_tokens or 0
        self.cost_usd += result.cost_usd or 0.0
        if result.score is not None:
            self.scored += 1
            self.total += result.score
            self.passed += bool(result.success)
        elif result.status == "skipped":
            self.skipped += 1
            self._count_reason(result.reason, 1)
        else:
            self.errors += 1
            self._count_reason(result.error or "error", 1)
            kind = result.metadata.get("error_kind")
            self.error_kinds[str(kind) if kind else ErrorKind.METRIC_ERROR] += 1

    def _count_reason(self, reason: str, count: int) -> None:
        if reason not in self.reasons and len(self.reasons) >= self.MAX_REASONS:
            reason = self.OTHER_REASONS
        self.reasons[reason] += count

    def merge(self, other: MetricSummary) -> None:
        """Add another run's aggregate of the same metric to this one."""
        self.count += other.count
        self.scored += other.scored
        self.total += other.total
        self.passed += other.passed
        self.errors += other.errors
        self.skipped += other.skipped
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost_usd += other.cost_usd
        for reason, count in other.reasons.items():
            self._count_reason(reason, count)
        self.error_kinds.update(other.error_kinds)

    def as_dict(self) -> dict[str, Any]:
        """The aggregate as plain JSON values (a replay's ``--json`` summary)."""
        return {
            "metric": self.name,
            "count": self.count,
            "scored": self.scored,
            "mean": self.mean,
            "pass_rate": self.pass_rate,
            "errors": self.errors,
            "skipped": self.skipped,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "top_reasons": dict(self.reasons.most_common(3)),
            "error_kinds": dict(self.error_kinds),
        }


class ResultSummary:
    """Per-metric aggregates over a run, in the order metrics were first seen."""

    def __init__(self) -> None:
        self.metrics: dict[str, MetricSummary] = {}

    def add(self, results: Sequence[MetricResult]) -> None:
        """Count one trace's results, each in its metric's aggregate."""
        for result in results:
            summary = self.metrics.get(result.name)
            if summary is None:
                summary = self.metrics[result.name] = MetricSummary(result.name)
            summary.add(result)

    def merge(self, other: ResultSummary) -> None:
        """Add another run's aggregates (a worker's share of a replay) to these."""
        for name, theirs in other.metrics.items():
            ours = self.metrics.get(name)
            if ours is None:
                ours = self.metrics[name] = MetricSummary(name)
            ours.merge(theirs)

    def as_dicts(self) -> list[dict[str, Any]]:
        """Each metric's :meth:`MetricSummary.as_dict`, in the order first seen."""
        return [summary.as_dict() for summary in self.metrics.values()]
