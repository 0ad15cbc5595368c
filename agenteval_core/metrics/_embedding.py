"""Embedding metrics (PandaProbe's definitions): coherence of output with input, and loops across traces."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from .._errors import MetricInputError
from .._text import jaccard, loop_tokens
from ..embedders._hashing import Embedder, cosine_similarities
from ..embedders._static import default_embedder
from ..schema._trace import EvalCase, RunStatus, Trace, text_of
from ._protocol import Metric, MetricKind, Score, register_metric

__all__ = ["Coherence", "LoopDetection"]

logger = logging.getLogger("agenteval")


class _EmbeddingMetric(Metric):
    kind: ClassVar[MetricKind] = MetricKind.EMBEDDING

    def __init__(self, *, embedder: Embedder | None = None, threshold: float | None = None) -> None:
        super().__init__(threshold=threshold)
        self.embedder: Embedder = embedder if embedder is not None else default_embedder()

    def texts_to_score(self, case: EvalCase, history: Sequence[Trace]) -> list[str] | Score:
        """The texts to embed, or a Score when the metric can decide without embedding."""
        raise NotImplementedError

    def score_vectors(self, case: EvalCase, history: Sequence[Trace], vectors: np.ndarray) -> Score:
        raise NotImplementedError

    @staticmethod
    def _batch_texts(cases: Sequence[EvalCase]) -> list[str]:
        return [
            text
            for case in cases
            for text in (text_of(case.input).strip(), text_of(case.actual_output).strip())
            if text
        ]

    def prepare(self, cases: Sequence[EvalCase]) -> None:
        # One embedding call for the batch; the embedder's cache serves the per-case calls.
        texts = self._batch_texts(cases)
        if texts:
            self.embedder.embed(texts)

    async def aprepare(self, cases: Sequence[EvalCase]) -> None:
        texts = self._batch_texts(cases)
        if texts:
            try:
                await self.embedder.aembed(texts)
            except Exception as exc:  # each case then reports the embedder's error itself
                logger.debug("%s: embedding a batch failed: %s", self.name, exc)

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        texts = self.texts_to_score(case, history)
        if isinstance(texts, Score):
            return texts
        return self.score_vectors(case, history, self.embedder.embed(texts))

    async def acompute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        texts = self.texts_to_score(case, history)
        if isinstance(texts, Score):
            return texts
        return self.score_vectors(case, history, await self.embedder.aembed(texts))


def vacuous(case: EvalCase, reason: str, metadata: dict[str, Any]) -> Score:
    """PandaProbe's perfect score for an empty input or output, for a run that completed; a
    run that did not complete is not scored, so its failure never reads as a pass."""
    trace = case.trace
    if trace is not None and not trace.completed:
        status = trace.status or RunStatus.ERROR
        return Score.skip(f"not scored: the run ended with status {status}", status=str(status))
    return Score(1.0, reason, metadata)


@register_metric
class Coherence(_EmbeddingMetric):
    """Whether the output follows from the input: 1 − cosine distance of their embeddings."""

    name = "coherence"

    def texts_to_score(self, case: EvalCase, history: Sequence[Trace]) -> list[str] | Score:
        source, answer = text_of(case.input).strip(), text_of(case.actual_output).strip()
        if not source or not answer:
            side = "input" if not source else "output"
            return vacuous(
                case,
                f"empty {side}: coherence assumed",
                {"coherence_gap": 0.0, "embedder": self.embedder.name},
            )
        return [source, answer]

    def score_vectors(self, case: EvalCase, history: Sequence[Trace], vectors: np.ndarray) -> Score:
        similarity = float(cosine_similarities(vectors[0], vectors[1:])[0])
        distance = 1.0 - similarity
        return Score(
            1.0 - distance,
            f"cosine distance between input and output {distance:.4f}",
            {"coherence_gap": round(distance, 4), "embedder": self.embedder.name},
        )


@register_metric
class LoopDetection(_EmbeddingMetric):
    """Whether the agent repeats itself across a session: 1 − max(cosine × Jaccard) over a window."""

    name = "loop_detection"
    uses_history: ClassVar[bool] = True

    def __init__(
        self,
        *,
        window: int = 3,
        embedder: Embedder | None = None,
        threshold: float | None = None,
    ) -> None:
        super().__init__(embedder=embedder, threshold=threshold)
        if window < 1:
            raise MetricInputError(f"loop_detection: window must be >= 1, got {window}")
        self.window = window

    def _previous(self, history: Sequence[Trace]) -> list[tuple[int, Trace, str]]:
        found: list[tuple[int, Trace, str]] = []
        for index in range(len(history) - 1, -1, -1):
            trace = history[index]
            text = text_of(trace.output).strip()
            if text:
                found.append((index, trace, text))
                if len(found) == self.window:
                    break
        return found[::-1]

    def texts_to_score(self, case: EvalCase, history: Sequence[Trace]) -> list[str] | Score:
        current = text_of(case.actual_output).strip()
        metadata: dict[str, Any] = {
            "window_size": self.window,
            "max_hybrid": 0.0,
            "comparisons": [],
        }
        if not current:
            return vacuous(case, "empty output: nothing to compare", metadata)
        previous = self._previous(history)
        if not previous:
            return vacuous(case, "no previous output in the session to compare with", metadata)
        return [current] + [text for _, _, text in previous]

    def score_vectors(self, case: EvalCase, history: Sequence[Trace], vectors: np.ndarray) -> Score:
        previous = self._previous(history)
        # a handful of comparisons: plain floats cost less than an array operation each
        cosines: list[float] = cosine_similarities(vectors[0], vectors[1:]).tolist()
        current_tokens = loop_tokens(text_of(case.actual_output))
        hybrids: list[float] = []
        comparisons = []
        for (index, trace, text), cosine in zip(previous, cosines, strict=True):
            overlap = jaccard(current_tokens, loop_tokens(text))
            hybrids.append(cosine * overlap)
            comparisons.append(
                {
                    "trace_index": index,
                    "trace_id": trace.id,
                    "cosine_similarity": round(cosine, 4),
                    "jaccard_similarity": round(overlap, 4),
                    "hybrid_score": round(hybrids[-1], 4),
                }
            )
        max_hybrid = max(hybrids)
        metadata = {
            "window_size": self.window,
            "max_hybrid": round(max_hybrid, 4),
            "comparisons": comparisons,
            "embedder": self.embedder.name,
        }
        return Score(
            1.0 - max_hybrid,
            f"highest cosine × Jaccard overlap with a recent output: {max_hybrid:.4f}",
            metadata,
        )
