"""Gaussia's ``agentic`` metric: conversation correctness with pass@k and pass^k.

A conversation (a session) is correct only if every interaction (trace) in it is correct. An
interaction is correct when its answer score reaches ``threshold`` and, when
``require_tool_correctness`` is on (the default, as in Gaussia) and the interaction had tool
expectations, its ``reference_tool_correctness`` reaches ``tool_threshold``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .._errors import MetricInputError
from ..schema._results import passes
from ._protocol import Score, SessionMetric
from ._registry import register_metric
from ._statistics import Estimator, estimate_pass_k

__all__ = ["Agentic"]

ANSWER_SIGNAL = "answer_correctness"
TOOL_SIGNAL = "reference_tool_correctness"


@register_metric
class Agentic(SessionMetric):
    """Conversation correctness (all interactions correct) with pass@k / pass^k and intervals.

    Reads two signals per interaction: ``answer_correctness`` (an answer judge's score) and
    ``reference_tool_correctness`` (None when the interaction had no tool expectations). The
    score is the fraction of correct interactions; with the default threshold of 1.0 a session
    succeeds only when it is fully correct. Interactions without an answer score are not
    evaluated and are counted in the metadata.
    """

    name = "agentic"
    default_threshold: ClassVar[float] = 1.0
    signal_names: ClassVar[tuple[str, ...]] = (ANSWER_SIGNAL, TOOL_SIGNAL)

    def __init__(
        self,
        *,
        k: int = 3,
        answer_threshold: float = 0.7,
        tool_threshold: float = 1.0,
        require_tool_correctness: bool = True,
        estimator: Estimator = "plugin",
        prior: tuple[float, float] = (1.0, 1.0),
        ci_level: float = 0.95,
        threshold: float | None = None,
    ) -> None:
        super().__init__(threshold=threshold)
        for label, value in (
            ("answer_threshold", answer_threshold),
            ("tool_threshold", tool_threshold),
        ):
            if not 0.0 <= value <= 1.0:
                raise MetricInputError(f"agentic: {label} must be in [0, 1], got {value}")
        if k < 1:
            raise MetricInputError(f"agentic: k must be >= 1, got {k}")
        self.k = k
        self.answer_threshold = answer_threshold
        self.tool_threshold = tool_threshold
        self.require_tool_correctness = require_tool_correctness
        self.estimator = estimator
        self.prior = prior
        self.ci_level = ci_level

    def interaction_correct(self, answer: float, tool: float | None) -> bool:
        """Whether one interaction counts as correct."""
        answer_ok = passes(answer, self.answer_threshold)
        if not self.require_tool_correctness or tool is None:
            return answer_ok
        return answer_ok and passes(tool, self.tool_threshold)

    def compute_session(
        self, trace_ids: Sequence[str], signals: Sequence[Mapping[str, float | None]]
    ) -> Score:
        verdicts: list[bool] = []
        tool_scores: list[float | None] = []
        unscored: list[str] = []
        for trace_id, row in zip(trace_ids, signals, strict=True):
            answer, tool = row.get(ANSWER_SIGNAL), row.get(TOOL_SIGNAL)
            if answer is None:
                unscored.append(trace_id)
                continue
            verdicts.append(self.interaction_correct(answer, tool))
            tool_scores.append(tool)
        if not verdicts:
            return Score.skip(
                "no interaction has an answer_correctness score (configure an answer judge)",
                total_interactions=len(trace_ids),
                unscored_interactions=unscored,
            )
        n, c = len(verdicts), sum(verdicts)
        estimate = estimate_pass_k(
            n,
            c,
            self.k,
            estimator=self.estimator if self.k <= n else "plugin",
            prior=self.prior,
            ci_level=self.ci_level,
        )
        metadata: dict[str, Any] = {
            "correct_interactions": c,
            "total_interactions": n,
            "is_fully_correct": c == n,
            "interaction_correct": verdicts,
            "tool_correctness_scores": tool_scores,
            "unscored_interactions": unscored,
            "k": self.k,
            "pass_at_k": estimate.pass_at_k,
            "pass_pow_k": estimate.pass_pow_k,
            "estimator": estimate.estimator,
            "pass_at_k_mean": estimate.pass_at_k_mean,
            "pass_pow_k_mean": estimate.pass_pow_k_mean,
            "pass_at_k_ci_low": estimate.pass_at_k_ci[0],
            "pass_at_k_ci_high": estimate.pass_at_k_ci[1],
            "pass_pow_k_ci_low": estimate.pass_pow_k_ci[0],
            "pass_pow_k_ci_high": estimate.pass_pow_k_ci[1],
            "ci_level": self.ci_level,
        }
        state = "fully correct" if c == n else "not fully correct"
        return Score(c / n, f"{c} of {n} interactions correct: conversation {state}", metadata)
