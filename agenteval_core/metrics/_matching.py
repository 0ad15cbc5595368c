"""Matching of expected and actual tool calls, shared by the tool-matching metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

__all__ = ["assign_by_name", "in_reference_order", "lcs_length", "multiset_overlap"]

_Call = TypeVar("_Call")


def multiset_overlap(expected: Sequence[str], actual: Sequence[str]) -> int:
    """How many names can be paired one-to-one, keeping multiplicity (order-free)."""
    return sum((Counter(expected) & Counter(actual)).values())


def assign_by_name(
    expected: Sequence[str],
    actual: Sequence[str],
    similarity: np.ndarray | None = None,
) -> list[tuple[int, int]]:
    """An optimal one-to-one pairing of expected to actual positions with equal names.

    Among pairings with the most name matches, ``similarity[i, j]`` (in [0, 1], e.g. how well
    call j's arguments match expected call i's reference) breaks ties, so the result never
    depends on the order of either list. Returns ``(expected_index, actual_index)`` pairs.
    """
    if not expected or not actual:
        return []
    same = np.equal.outer(np.asarray(expected, dtype=object), np.asarray(actual, dtype=object))
    same = same.astype(float)
    # A name match is worth more than any total of tie-break similarities.
    weight = same * (len(expected) + 1.0)
    if similarity is not None:
        weight = weight + same * similarity
    from scipy.optimize import linear_sum_assignment  # here: scipy.optimize is slow to import

    rows, cols = linear_sum_assignment(weight, maximize=True)
    return [(int(i), int(j)) for i, j in zip(rows, cols, strict=True) if same[i, j]]


def lcs_length(expected: Sequence[str], actual: Sequence[str]) -> int:
    """Length of the longest common subsequence of two name sequences."""
    if not expected or not actual:
        return 0
    previous = [0] * (len(actual) + 1)
    for name in expected:
        current = [0]
        for j, other in enumerate(actual):
            current.append(previous[j] + 1 if name == other else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def in_reference_order(
    groups: Sequence[Sequence[_Call]], reference_of: Callable[[_Call], int]
) -> list[_Call]:
    """The calls of ``groups`` in order, those made together (the parallel calls of one model
    step, a group) put in the reference's order among themselves (``reference_of``: a call's
    place in the reference; a call the reference does not hold after those it does): their
    order in the trace carries no meaning."""
    return [call for group in groups for call in sorted(group, key=reference_of)]
