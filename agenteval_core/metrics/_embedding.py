"""Embedding metrics (PandaProbe's definitions): coherence of output with input, and loops across traces."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._errors import ErrorKind, MetricInputError
from .._sync import run_sync
from .._text import (
    Frame,
    first_words,
    jaccard,
    link_words,
    loop_tokens,
    prose_of,
    says_nothing_alone,
    shared_frame,
    without_urls,
    words,
)
from ..embedders._hashing import Embedder
from ..embedders._static import default_embedder
from ..schema._results import MetricResult
from ..schema._trace import EvalCase, RunStatus, Trace, last_answer, text_of
from ._protocol import Metric, MetricKind, Score
from ._registry import register_metric

__all__ = ["Coherence", "LoopDetection"]

logger = logging.getLogger("agenteval")


@dataclass
class Comparison:
    """What an embedding metric compares for one case: the first text with each of the
    others, and whatever else it needs to score the cosines (``context``)."""

    texts: list[str]
    context: Any = None


class _EmbeddingMetric(Metric):
    """A metric that compares one text of a trace with others by cosine similarity.

    ``texts_to_score`` says what to compare or decides without embedding;
    ``score_similarities`` turns the cosines into a score. A batch embeds all its cases'
    texts in one call and takes every cosine in one product.
    """

    kind: ClassVar[MetricKind] = MetricKind.EMBEDDING

    def __init__(self, *, embedder: Embedder | None = None, threshold: float | None = None) -> None:
        super().__init__(threshold=threshold)
        self.embedder: Embedder = embedder if embedder is not None else default_embedder()

    def texts_to_score(self, case: EvalCase, history: Sequence[Trace]) -> Comparison | Score:
        """The texts to compare, or a Score when the metric can decide without embedding."""
        raise NotImplementedError

    def score_similarities(
        self, case: EvalCase, comparison: Comparison, cosines: list[float | None]
    ) -> Score:
        """The score from the cosine similarity of the first text with each of the others
        (``None`` where the other text got no vector from the embedder: see
        :func:`no_vector`)."""
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
        plan = self.texts_to_score(case, history)
        if isinstance(plan, Score):
            return plan
        texts = list(dict.fromkeys(plan.texts))
        (cosines,) = self._similarities([plan.texts], texts, self.embedder.embed(texts))
        return self._scored(case, plan, cosines)

    async def acompute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        plan = self.texts_to_score(case, history)
        if isinstance(plan, Score):
            return plan
        texts = list(dict.fromkeys(plan.texts))
        (cosines,) = self._similarities([plan.texts], texts, await self.embedder.aembed(texts))
        return self._scored(case, plan, cosines)

    def _scored(
        self, case: EvalCase, plan: Comparison, cosines: list[float | None] | Score
    ) -> Score:
        """The score from a case's cosines, or the failure that stands in for them."""
        if isinstance(cosines, Score):
            return cosines
        return self.score_similarities(case, plan, cosines)

    def measure_batch(
        self, cases: Sequence[EvalCase], histories: Sequence[Sequence[Trace]]
    ) -> list[MetricResult]:
        # the engine calls ameasure_batch; this is for callers without an event loop
        result: list[MetricResult] = run_sync(self.ameasure_batch(cases, histories))
        return result

    async def ameasure_batch(
        self, cases: Sequence[EvalCase], histories: Sequence[Sequence[Trace]]
    ) -> list[MetricResult]:
        started = time.perf_counter()
        plans, texts = self._plans(cases, histories)
        vectors: npt.NDArray[np.floating] | Score | None = None
        try:
            vectors = await self.embedder.aembed(texts) if texts else None
        except Exception as exc:  # every case that needed the embedder says why
            vectors = Score.from_exception(exc)
        return self._batch_results(cases, plans, texts, vectors, started)

    def _plans(
        self, cases: Sequence[EvalCase], histories: Sequence[Sequence[Trace]]
    ) -> tuple[list[Comparison | Score], list[str]]:
        """Each case's comparison (or its score when it needs none), and the batch's
        distinct texts."""
        plans: list[Comparison | Score] = []
        for case, history in zip(cases, histories, strict=True):
            try:
                plans.append(self.texts_to_score(case, history))
            except Exception as exc:
                plans.append(Score.from_exception(exc))
        texts = list(
            dict.fromkeys(t for plan in plans if isinstance(plan, Comparison) for t in plan.texts)
        )
        return plans, texts

    def _batch_results(
        self,
        cases: Sequence[EvalCase],
        plans: list[Comparison | Score],
        texts: list[str],
        vectors: npt.NDArray[np.floating] | Score | None,
        started: float,
    ) -> list[MetricResult]:
        """One result per case: its own score, the embedder's failure, or the score from
        its cosines (``vectors`` embeds ``texts``; ``None`` when no case needed any)."""
        embedded = [plan.texts for plan in plans if isinstance(plan, Comparison)]
        similarities = iter(
            self._similarities(embedded, texts, vectors)
            if vectors is not None and not isinstance(vectors, Score)
            else []
        )
        scores: list[Score] = []
        for case, plan in zip(cases, plans, strict=True):
            if isinstance(plan, Score):
                scores.append(plan)
            elif isinstance(vectors, Score):
                scores.append(vectors)
            else:
                try:
                    scores.append(self._scored(case, plan, next(similarities)))
                except Exception as exc:
                    scores.append(Score.from_exception(exc))
        share = (time.perf_counter() - started) * 1000.0 / len(cases) if cases else 0.0
        return [
            self._case_result(score, share, case) for case, score in zip(cases, scores, strict=True)
        ]

    def _similarities(
        self,
        plans: Sequence[Sequence[str]],
        texts: Sequence[str],
        vectors: npt.NDArray[np.floating],
    ) -> list[list[float | None] | Score]:
        """For each plan, the cosine of its first text with each of the others (one product
        for the whole batch), or the failure of a plan with a text the embedder gave no
        usable vector. ``vectors`` should embed ``texts``, one row each; each row is
        L2-normalised here (an embedder of the user's may not normalise), so a cosine is a
        dot product. The texts compared are never empty (the metrics decide those first),
        so a zero row is a text the embedder had nothing for (the default one does not read
        it: another language, or no token it knows); its cosine 0 would read as a confident
        score, so none is made up: a plan whose first text has one fails, and another text
        with one gets ``None`` for its metric to decide on."""
        name = self.embedder.name
        try:
            matrix = np.asarray(vectors, dtype=np.float64)
        except (TypeError, ValueError) as exc:  # rows of different lengths, or not numbers
            return [_unusable(f"{name} returned no matrix of numbers ({exc})")] * len(plans)
        if matrix.ndim != 2 or len(matrix) != len(texts):
            problem = f"{name} returned an array of shape {matrix.shape} for {len(texts)} texts"
            return [_unusable(f"{problem}; an embedder returns one row per text")] * len(plans)
        # a NaN or infinite value (a model's overflow in half precision, a server's bug) would
        # otherwise read as a zero row: the distance 1 of an empty text, a confident 0.0
        usable = np.all(np.isfinite(matrix), axis=1, keepdims=True)  # a column
        broken = set(np.flatnonzero(~usable).tolist())
        if broken:  # their cases fail below; zeros (in a copy) keep the product free of NaN
            matrix = np.where(usable, matrix, 0.0)
        row = {text: index for index, text in enumerate(texts)}
        anchors = [row[plan[0]] for plan in plans for _ in plan[1:]]
        others = [row[text] for plan in plans for text in plan[1:]]
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        # zero rows; a NaN row, zeroed above, is reported as one
        blank = set(np.flatnonzero(norms[:, 0] == 0).tolist()) - broken
        matrix = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
        dots = np.einsum("ij,ij->i", matrix[anchors], matrix[others])
        # rounding can take a normalised pair a hair past ±1
        flat: list[float | None] = np.minimum(
            np.maximum(dots, -1.0, out=dots), 1.0, out=dots
        ).tolist()
        if blank:
            flat = [
                None if other in blank else cosine
                for other, cosine in zip(others, flat, strict=True)
            ]
        cosines: list[list[float | None] | Score] = []
        start = 0
        for plan in plans:
            bad = [text for text in plan if row[text] in broken] if broken else None
            if blank and row[plan[0]] in blank:
                cosines.append(no_vector(name, plan[0]))
            elif bad:
                cosines.append(
                    _unusable(
                        f"{name} gave {first_words(bad[0])!r} a vector with NaN or infinite "
                        "values; a cosine of it means nothing, so this case is not scored "
                        "(check the embedding model or server)"
                    )
                )
            else:
                cosines.append(flat[start : start + len(plan) - 1])
            start += len(plan) - 1
        return cosines


def _unusable(problem: str) -> Score:
    """The failure of a case whose texts the embedder gave no usable vectors."""
    return Score.failure(f"embedder error: {problem}", error_kind=ErrorKind.JUDGE_ERROR)


def no_vector(embedder: str, text: str) -> Score:
    """The failure of a case with a text the embedder gave a zero vector: it does not read
    the text (another language, or no token it knows), so no cosine with it means anything."""
    return _unusable(
        f"{embedder} gave {first_words(text)!r} a zero vector: it does not read the text (a "
        "language its model was not trained on, or no token it knows), so this case is not "
        "scored (use an embedder that reads this language: see the embeddings docs)"
    )


def earlier_outputs(history: Sequence[Trace], count: int) -> list[tuple[int, Trace, str]]:
    """The last ``count`` earlier traces of the session with a non-empty output, oldest
    first, with their positions and stripped outputs."""
    last_with_output = getattr(history, "last_with_output", None)
    if last_with_output is not None:  # the engine's history: it keeps only such traces
        return [
            (index, trace, prose_of(trace.output).strip())
            for index, trace in last_with_output(count)
        ]
    found: list[tuple[int, Trace, str]] = []
    for index in range(len(history) - 1, -1, -1):
        trace = history[index]
        text = prose_of(trace.output).strip()
        if text:
            found.append((index, trace, text))
            if len(found) == count:
                break
    return found[::-1]


def _session_answer(case: EvalCase, history: Sequence[Trace]) -> str:
    """The session's last earlier output, else the last output of the case's
    ``conversation``."""
    found = earlier_outputs(history, 1)
    return found[0][2] if found else prose_of(last_answer(case.conversation or []))


def _previous_answer(case: EvalCase, history: Sequence[Trace]) -> str:
    """The agent's answer in the turn before this case: as the run's model was sent it,
    else the session's (:func:`_session_answer`)."""
    sent = case.trace.previous_answer() if case.trace is not None else ""
    return prose_of(sent) or _session_answer(case, history)


def _frame_left_out(frame: Frame) -> tuple[dict[str, str], str]:
    """The metadata and the reason's note of a frame left out of the answers compared."""
    parts = [(part, text) for part, text in zip(frame._fields, frame, strict=True) if text]
    left_out = {f"{part}_left_out": first_words(text) for part, text in parts}
    said = " and ".join(f"the {part} {first_words(text)!r}" for part, text in parts)
    note = (
        f" (left out: {said} it shares with an earlier answer, about no request: a greeting, "
        "sign-off or disclaimer)"
    )
    return left_out, note if said else ""


def vacuous(case: EvalCase, reason: str, metadata: dict[str, Any]) -> Score:
    """PandaProbe's perfect score for an empty input or output, for a run that completed; a
    run that did not complete, or whose answer is empty because its model refused one, is
    not scored, so its failure never reads as a pass."""
    trace = case.trace
    if trace is not None and not trace.completed:
        status = trace.status or RunStatus.ERROR
        return Score.skip(f"not scored: the run ended with status {status}", status=str(status))
    if trace is not None and not text_of(case.actual_output).strip():
        refused = trace.refusal()  # an empty answer because the provider refused one
        if refused is not None:
            return Score.skip("not scored: the model refused to answer", refusal=refused)
    return Score(1.0, reason, metadata)


@register_metric
class Coherence(_EmbeddingMetric):
    """Whether the output follows from the input: 1 − cosine distance of their embeddings.

    A request that says nothing on its own ("Yes, please.", "The second one", "Make it
    shorter.": only stop words and words of assent, thanks or choice, or of something to do
    to the last answer) answers the agent's previous turn: the
    answer is compared with the request alone and after that turn's answer, the closer
    counting; with no earlier turn known (none in the messages the run's model was sent,
    the session's history or the case's ``conversation``) the case is not scored. The opening
    and ending an answer shares with the session's previous answer are left out of it when
    they are about no request (a greeting, a sign-off, a disclaimer: :func:`shared_frame`),
    and so are its web addresses (:func:`without_urls`). A structured request or answer is
    read by the texts it holds (:func:`prose_of`)."""

    name = "coherence"
    uses_history: ClassVar[bool] = True
    history_fields: ClassVar[frozenset[str] | None] = frozenset({"output"})
    window: ClassVar[int] = 1
    """Earlier traces read: the previous turn's answer."""

    def texts_to_score(self, case: EvalCase, history: Sequence[Trace]) -> Comparison | Score:
        media = case.trace.request_media() if case.trace is not None else []
        if media:  # a correct answer to "Describe this image." reads as off-topic text
            kinds = ", ".join(sorted(set(media)))
            return Score.skip(
                f"not scored: the request came with media ({kinds}) beside its text, and "
                "coherence compares the text alone",
                media=media,
            )
        source, answer = prose_of(case.input).strip(), prose_of(case.actual_output).strip()
        if not source or not answer:
            side = "input" if not source else "output"
            return vacuous(
                case,
                f"empty {side}: coherence assumed",
                {"coherence_gap": 0.0, "embedder": self.embedder.name},
            )
        # a greeting, sign-off or disclaimer on every answer is about no request: what the
        # answer says is between them
        frame = shared_frame(answer, _session_answer(case, history), source)
        # the web addresses of its sources are about no request either
        answer, urls = without_urls(frame.strip(answer))
        source = without_urls(source)[0]
        if says_nothing_alone(source):
            # a correct booking after "Yes, please." has nothing in common with those two
            # words: the answer follows from the offer they accept
            previous = _previous_answer(case, history)
            if not previous:
                return Score.skip(
                    f"not scored: the request {first_words(source)!r} says nothing on its "
                    "own (it answers an earlier turn), and no earlier turn of its session is "
                    "known"
                )
            # the answer first: its cosine with the request alone ("thanks!" → "You are
            # welcome!") and with the request after the turn it answers; the better counts
            previous = without_urls(previous)[0]
            return Comparison([answer, source, f"{previous}\n{source}"], (previous, frame, urls))
        return Comparison([source, answer], (None, frame, urls))

    def score_similarities(
        self, case: EvalCase, comparison: Comparison, cosines: list[float | None]
    ) -> Score:
        previous, frame, urls = comparison.context
        left_out, note = _frame_left_out(frame)
        if urls:
            left_out["urls_left_out"] = urls
            note += f" ({urls} web address(es) of the answer left out)"
        if previous is None:
            (cosine,) = cosines
            if cosine is None:
                return no_vector(self.embedder.name, comparison.texts[1])
            distance = 1.0 - cosine
            return Score(
                1.0 - distance,
                f"cosine distance between input and output {distance:.4f}{note}",
                {"coherence_gap": round(distance, 4), "embedder": self.embedder.name, **left_out},
            )
        alone, in_context = cosines
        if in_context is None:  # the request and the previous answer: neither read
            return no_vector(self.embedder.name, comparison.texts[2])
        with_previous = alone is None or in_context > alone
        if alone is not None and not with_previous:
            distance, read = 1.0 - alone, "alone"
        else:
            distance, read = 1.0 - in_context, "after the previous answer"
        return Score(
            1.0 - distance,
            f"cosine distance between input and output {distance:.4f}, the input read {read} "
            f"(it says nothing on its own){note}",
            {
                "coherence_gap": round(distance, 4),
                "embedder": self.embedder.name,
                "previous_answer": first_words(previous),
                "input_read_after_previous_answer": with_previous,
                **left_out,
            },
        )


_DIGIT = re.compile(r"\d")


def _named_terms(text: str) -> frozenset[str]:
    """The words of ``text`` that can name what its request asked about: those with a digit
    (order numbers, ids, dates, amounts, one digit too: "A-7", "table 3", which the
    Jaccard's tokens leave out) and the words of its links' paths (the article a help
    answer links to)."""
    numbers = (
        frozenset(word for word in words(text) if _DIGIT.search(word))
        if _DIGIT.search(text)
        else frozenset()
    )
    return numbers | link_words(text)


@register_metric
class LoopDetection(_EmbeddingMetric):
    """Whether the agent repeats itself across a session: 1 − max(cosine × Jaccard) over a window.

    An earlier output is no repeat when the current one carries a number or id of its own
    request, or links to a page named by its request's words, that neither the earlier
    output nor its request held: the same template answering about another order, invoice
    or flight, or linking the help article asked for (``new_from_request`` in that
    comparison's metadata, its hybrid 0). An opening or ending the answers share that is about
    no request (a greeting, a sign-off, a disclaimer: :func:`shared_frame`) is left out of
    each. A structured answer is read by the texts it holds (:func:`prose_of`)."""

    name = "loop_detection"
    uses_history: ClassVar[bool] = True
    history_fields: ClassVar[frozenset[str] | None] = frozenset({"input", "output"})

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

    def texts_to_score(self, case: EvalCase, history: Sequence[Trace]) -> Comparison | Score:
        current = prose_of(case.actual_output).strip()
        previous = earlier_outputs(history, self.window) if current else []
        if not previous:
            metadata = {"window_size": self.window, "max_hybrid": 0.0, "comparisons": []}
            if not current:
                return vacuous(case, "empty output: nothing to compare", metadata)
            return vacuous(case, "no previous output in the session to compare with", metadata)
        request = text_of(case.input).strip()
        # a greeting, disclaimer or sign-off on every answer is about no request: a repeat is
        # of what the answers say between them
        frame = max(
            (shared_frame(current, text, request) for _, _, text in previous),
            key=lambda found: found.size,
        )
        texts = [frame.strip(text) for text in [current] + [text for _, _, text in previous]]
        return Comparison(texts, (previous, frame))

    def score_similarities(
        self, case: EvalCase, comparison: Comparison, cosines: list[float | None]
    ) -> Score:
        previous: list[tuple[int, Trace, str]]
        previous, frame = comparison.context
        # the stripped text, as when this output is an earlier one: one cache entry each
        current_tokens = loop_tokens(comparison.texts[0])
        # numbers and linked words the answer takes from its request (most answers hold
        # none: no work then)
        asked = _named_terms(comparison.texts[0])
        if asked:
            asked &= frozenset(words(text_of(case.input)))
        hybrids: list[float] = []
        comparisons = []
        compared_with = comparison.texts[1:]
        for (index, trace, _), text, cosine in zip(previous, compared_with, cosines, strict=True):
            earlier = loop_tokens(text)
            overlap = jaccard(current_tokens, earlier)
            # "Your order 51877 has shipped" after "Your order 48213 has shipped", asked
            # about 51877: a template answering a new request, whatever else it shares
            new = (
                asked - frozenset(words(text)) - frozenset(words(text_of(trace.input)))
                if asked
                else None
            )
            if cosine is None and overlap and not new:  # an earlier output it could not read
                return no_vector(self.embedder.name, text)
            # with no word in common the product is 0 whatever the cosine: an output the
            # embedder could not read (an emoji's thumbs-up) is then no repeat
            hybrids.append(cosine * overlap if cosine is not None and not new else 0.0)
            compared: dict[str, Any] = {
                "trace_index": index,
                "trace_id": trace.id,
                "cosine_similarity": round(cosine, 4) if cosine is not None else None,
                "jaccard_similarity": round(overlap, 4),
                "hybrid_score": round(hybrids[-1], 4),
            }
            if new:
                compared["new_from_request"] = sorted(new)
            comparisons.append(compared)
        max_hybrid = max(hybrids)
        metadata = {
            "window_size": self.window,
            "max_hybrid": round(max_hybrid, 4),
            "comparisons": comparisons,
            "embedder": self.embedder.name,
        }
        reason = f"highest cosine × Jaccard overlap with a recent output: {max_hybrid:.4f}"
        left_out, note = _frame_left_out(frame)
        metadata.update(left_out)
        reason += note
        answered = [c for c in comparisons if "new_from_request" in c]
        if answered:
            numbers = sorted({n for c in answered for n in c["new_from_request"]})
            reason += (
                f" ({len(answered)} of {len(comparisons)} no repeat: this answer carries "
                f"{', '.join(numbers)} from its request, which they did not)"
            )
        return Score(1.0 - max_hybrid, reason, metadata)
