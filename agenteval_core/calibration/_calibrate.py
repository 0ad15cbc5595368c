"""Agreement between a metric (usually an LLM judge) and human labels: the share of
verdicts that agree, Cohen's kappa (quadratic-weighted for graded labels), the confusion
matrix, and the threshold on the metric's score that best matches the labels."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ValidationError

from .._errors import CaptureError, MetricInputError
from ..engine._engine import Engine, resolve_metrics
from ..schema._capture import runs_with_turns, skipping_bad_lines
from ..schema._results import passes
from ..schema._trace import EvalCase, Trace

__all__ = [
    "GRADES",
    "CalibrationLabel",
    "CalibrationReport",
    "MetricCalibration",
    "calibrate",
    "read_labels",
]

GRADES = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Graded labels and scores are compared on this scale (each rounded to the nearest grade)."""


@dataclass(frozen=True)
class CalibrationLabel:
    """A person's verdict on one trace for one metric: pass/fail, or a score in [0, 1]."""

    trace: Trace
    metric: str
    label: bool | float
    conversation: tuple[dict[str, Any], ...] = ()
    """The earlier turns of the trace's session, oldest first (``{"input", "output"}``
    each): what a metric that reads a session's history compares the trace with, as a
    replay does (``loop_detection``, a follow-up's ``coherence``)."""


@dataclass
class MetricCalibration:
    """How one metric agrees with the labels given for it."""

    metric: str
    threshold: float
    graded: bool
    labelled: int
    scored: int
    agreement: float | None
    """Share of traces where the metric's pass/fail (at its threshold) matches the label's
    (a graded label passes at the same threshold)."""
    kappa: float | None
    """Cohen's kappa of pass/fail, or, for graded labels, quadratic-weighted kappa on
    :data:`GRADES`; ``None`` when it is undefined (every label and verdict the same)."""
    confusion: dict[str, dict[str, int]]
    """Rows: the label; columns: the metric. ``pass``/``fail``, or grades for graded labels."""
    best_threshold: float | None
    """The threshold on the metric's score that agrees with the most labels: one of the
    scores, or halfway from the highest score to 1 (every trace fails); ties: the one
    nearest the current threshold."""
    best_agreement: float | None
    mean_absolute_error: float | None = None
    """Graded labels only: mean |score − label|."""
    unscored: list[str] = field(default_factory=list)
    """Trace ids the metric gave no score (an error or a skip), left out of the figures."""
    unscored_reasons: dict[str, str] = field(default_factory=dict)
    """Why each trace in ``unscored`` has no score (the result's error or skip reason)."""
    unscored_kinds: dict[str, str] = field(default_factory=dict)
    """The :class:`~agenteval_core.ErrorKind` of each trace in ``unscored`` that ended in an
    error (a skip has none)."""

    @property
    def best_summary(self) -> str | None:
        """The best threshold with its agreement, as shown (``0.450 (0.900)``); None when
        no threshold could be chosen."""
        if self.best_threshold is None:
            return None
        agreement = "-" if self.best_agreement is None else f"{self.best_agreement:.3f}"
        return f"{self.best_threshold:.3f} ({agreement})"


@dataclass
class CalibrationReport:
    """One :class:`MetricCalibration` per labelled metric."""

    metrics: dict[str, MetricCalibration]

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the report as JSON (``agenteval calibrate --json``), for the HTML report."""
        document = {"calibration": {name: asdict(item) for name, item in self.metrics.items()}}
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CalibrationReport:
        """Read a report :meth:`save` wrote.

        Raises:
            CaptureError: the file is missing or is not a calibration report.
        """
        name = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as handle:
                document = json.load(handle)
            items = document["calibration"]
            return cls({metric: MetricCalibration(**item) for metric, item in items.items()})
        except FileNotFoundError:
            raise CaptureError(f"{name}: no such calibration file") from None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CaptureError(
                f"{name}: not a calibration report ({exc!r}); write one with "
                "agenteval calibrate LABELS --json FILE"
            ) from None


CONVERSATION_KEPT = 20
"""The earlier turns of its session a label keeps, the most recent: more than any metric
reads (``loop_detection`` compares the last 3 answers)."""


def read_labels(
    path: str | os.PathLike[str], *, capture: str | os.PathLike[str] | None = None
) -> list[CalibrationLabel]:
    """Read a labels file: JSON Lines, one label per line, each with ``metric``, ``label``
    (``"pass"``, ``"fail"``, ``true``/``false`` or a score in [0, 1]) and either the whole
    ``trace`` (with, optionally, the ``conversation`` before it: ``{"input", "output"}``
    turns, oldest first) or a ``trace_id`` found in ``capture``, whose session's earlier
    turns there are the label's conversation.

    Raises:
        CaptureError: naming the file, line and what is wrong.
    """
    name = os.fspath(path)
    records = []
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115  (closed below)
    except FileNotFoundError:
        raise CaptureError(f"{name}: no such labels file") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{name}:{number}"
            try:
                record = json.loads(line)
            except ValueError:
                raise CaptureError(f"{where}: not a JSON line") from None
            if not isinstance(record, dict):
                raise CaptureError(f"{where}: expected an object with metric, label and trace")
            metric = record.get("metric")
            if not isinstance(metric, str) or not metric:
                raise CaptureError(f"{where}: 'metric' must name a metric")
            records.append((where, record, metric, _label(record, where)))
    if not records:
        raise CaptureError(f"{name}: no labels in the file")
    wanted = {r.get("trace_id") for _, r, _, _ in records if "trace" not in r}
    found: dict[str, tuple[Trace, tuple[dict[str, Any], ...]]] = {}
    with skipping_bad_lines() as unread:
        if capture is not None:
            # only the labelled traces are kept, each with the turns before it
            for trace, turns, _ in runs_with_turns(
                capture, keep=CONVERSATION_KEPT, on_error=unread.append
            ):
                if trace.id in wanted:
                    found[trace.id] = (trace, tuple(turns))
    labels = []
    for where, record, metric, label in records:
        trace, conversation = _trace_of(record, found, where, capture, len(unread))
        labels.append(CalibrationLabel(trace, metric, label, conversation))
    return labels


def _trace_of(
    record: dict[str, Any],
    found: dict[str, tuple[Trace, tuple[dict[str, Any], ...]]],
    where: str,
    capture: Any,
    unread: int,
) -> tuple[Trace, tuple[dict[str, Any], ...]]:
    """The label's trace and the turns before it."""
    if "trace" in record:
        try:
            trace = Trace.model_validate(record["trace"])
        except ValidationError as exc:
            problem = exc.errors(include_url=False)[0]
            field_name = ".".join(str(p) for p in problem["loc"])[:120]
            raise CaptureError(f"{where}: trace field '{field_name}': {problem['msg']}") from None
        return trace, _conversation(record.get("conversation"), where)
    trace_id = record.get("trace_id")
    if not isinstance(trace_id, str):
        raise CaptureError(f"{where}: give the 'trace' itself or a 'trace_id' (and --capture)")
    if capture is None:
        raise CaptureError(f"{where}: trace_id {trace_id!r} needs the capture it is in (--capture)")
    if trace_id not in found:
        skipped = (
            f" (or on one of the {unread} line(s) of it that could not be read)" if unread else ""
        )
        raise CaptureError(
            f"{where}: trace_id {trace_id!r} is not in {os.fspath(capture)}{skipped}"
        )
    return found[trace_id]


def _conversation(value: Any, where: str) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(turn, dict) and set(turn) <= {"input", "output"} for turn in value
    ):
        raise CaptureError(
            f"{where}: 'conversation' must be a list of turns, each an object with 'input' "
            "and 'output', oldest first"
        )
    return tuple(value)


def _label(record: dict[str, Any], where: str) -> bool | float:
    value = record.get("label")
    if isinstance(value, bool):
        return value
    if value in ("pass", "fail"):
        return value == "pass"
    if isinstance(value, int | float) and 0 <= value <= 1:  # 1.0 is a score, not "pass"
        return float(value)
    raise CaptureError(f"{where}: 'label' must be pass, fail, true, false or a score in [0, 1]")


def calibrate(
    labels: Sequence[CalibrationLabel], *, judge: Any = None, embedder: Any = None
) -> CalibrationReport:
    """Score each labelled trace with its metric (the judge and embedder reach the metrics
    that take them) and measure the agreement per metric."""
    by_metric: dict[str, list[CalibrationLabel]] = defaultdict(list)
    for label in labels:
        by_metric[label.metric].append(label)
    report = CalibrationReport({})
    for name, group in by_metric.items():
        trace_metrics, session_metrics = resolve_metrics([name], judge=judge, embedder=embedder)
        if session_metrics:
            raise MetricInputError(
                f"{name} is a session metric; calibrate trace metrics, whose results are per trace"
            )
        graded = {isinstance(label.label, float) for label in group}
        if len(graded) > 1:
            raise MetricInputError(f"{name}: labels mix pass/fail with scores; use one kind")
        # each trace scored on its own, after the turns before it (as a replay scores it)
        cases = [
            EvalCase.from_trace(
                label.trace.model_copy(update={"session_id": None}),
                conversation=list(label.conversation) or None,
            )
            for label in group
        ]
        engine = Engine(trace_metrics, judge=judge, embedder=embedder)
        results = [outcome.results[0] for outcome in engine.score_sync(cases)]
        report.metrics[name] = _measure(
            name, trace_metrics[0].threshold, group, results, graded.pop()
        )
    return report


def _measure(
    name: str, threshold: float, labels: list[CalibrationLabel], results: list[Any], graded: bool
) -> MetricCalibration:
    pairs = [
        (label, r.score) for label, r in zip(labels, results, strict=True) if r.score is not None
    ]
    reasons = {
        label.trace.id: r.error or r.reason
        for label, r in zip(labels, results, strict=True)
        if r.score is None
    }
    unscored = list(reasons)
    kinds = {
        label.trace.id: str(r.metadata["error_kind"])
        for label, r in zip(labels, results, strict=True)
        if r.score is None and r.metadata.get("error_kind")
    }
    truth = [
        passes(float(label.label), threshold) if graded else bool(label.label) for label, _ in pairs
    ]
    scores = [float(score) for _, score in pairs]
    verdicts = [passes(score, threshold) for score in scores]
    calibration = MetricCalibration(
        metric=name,
        threshold=threshold,
        graded=graded,
        labelled=len(labels),
        scored=len(pairs),
        agreement=_agreement(truth, verdicts),
        kappa=None,
        confusion={},
        best_threshold=None,
        best_agreement=None,
        unscored=unscored,
        unscored_reasons=reasons,
        unscored_kinds=kinds,
    )
    if not pairs:
        return calibration
    if graded:
        wanted = [_grade(float(label.label)) for label, _ in pairs]
        given = [_grade(score) for score in scores]
        calibration.kappa = _weighted_kappa(wanted, given, len(GRADES))
        calibration.confusion = {
            f"{GRADES[row]:g}": {f"{GRADES[col]:g}": 0 for col in range(len(GRADES))}
            for row in range(len(GRADES))
        }
        for row, col in zip(wanted, given, strict=True):
            calibration.confusion[f"{GRADES[row]:g}"][f"{GRADES[col]:g}"] += 1
        calibration.mean_absolute_error = sum(
            abs(score - float(label.label)) for (label, _), score in zip(pairs, scores, strict=True)
        ) / len(pairs)
    else:
        as_index = [[int(not t) for t in truth], [int(not v) for v in verdicts]]
        calibration.kappa = _weighted_kappa(as_index[0], as_index[1], 2)
        calibration.confusion = {
            row: {col: 0 for col in ("pass", "fail")} for row in ("pass", "fail")
        }
        for t, v in zip(truth, verdicts, strict=True):
            calibration.confusion["pass" if t else "fail"]["pass" if v else "fail"] += 1
    # each score as the threshold is every way to pass some and fail the rest but one: to
    # fail them all (labels that fail every trace), a threshold above the highest score
    candidates = set(scores) | {threshold}
    if max(scores) < 1.0:
        candidates.add((max(scores) + 1.0) / 2)
    best = max(
        sorted(candidates),
        key=lambda t: (
            _agreement(truth, [passes(s, t) for s in scores]) or 0.0,
            -abs(t - threshold),
        ),
    )
    calibration.best_threshold = best
    calibration.best_agreement = _agreement(truth, [passes(s, best) for s in scores])
    return calibration


def _grade(value: float) -> int:
    return min(range(len(GRADES)), key=lambda index: abs(GRADES[index] - value))


def _agreement(truth: list[bool], verdicts: list[bool]) -> float | None:
    if not truth:
        return None
    return sum(t == v for t, v in zip(truth, verdicts, strict=True)) / len(truth)


def _weighted_kappa(wanted: list[int], given: list[int], categories: int) -> float | None:
    """Cohen's kappa with quadratic weights (for two categories, plain kappa): 1 − observed
    weighted disagreement / the disagreement expected from the two marginals alone."""
    count = len(wanted)
    span = max(1, categories - 1)

    def weight(a: int, b: int) -> float:
        return ((a - b) / span) ** 2

    observed = sum(weight(a, b) for a, b in zip(wanted, given, strict=True)) / count
    rows = [wanted.count(k) / count for k in range(categories)]
    cols = [given.count(k) / count for k in range(categories)]
    expected = sum(
        rows[a] * cols[b] * weight(a, b) for a in range(categories) for b in range(categories)
    )
    if expected == 0:
        return None
    return 1 - observed / expected
