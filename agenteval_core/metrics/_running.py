"""Running aggregates of a session's per-trace values, read after every trace.

A results file records a session's scores after each of its traces. Recomputed from all the
session's values, that read costs O(n) for the n-th trace, so one long session (a bot whose
every run shares a session id) replays in quadratic time. These keep what the scores need as
values come, change and go, in O(log n) a change and O(1) a read (the largest value, once it
is taken back, is looked up again among the k largest), and give exactly the floats the
batch formulas give: sums are kept exactly, as integers, and rounded once, as ``math.fsum``
rounds them.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter

__all__ = ["LargestShare", "SumOfSquares", "top_count"]

_UNIT_BITS = 1074
"""Every finite float is an integer multiple of 2**-1074 (the smallest subnormal)."""


def _exact(value: float) -> int:
    """``value`` as an integer count of 2**-1074: exact, so sums of these never round."""
    numerator, denominator = value.as_integer_ratio()  # denominator: a power of two
    return numerator << (_UNIT_BITS + 1 - denominator.bit_length())


def top_count(size: int, share: float) -> int:
    """How many of ``size`` values are the largest ``share`` of them: at least one."""
    return max(1, math.ceil(size * share))


def _rounded(exact: int) -> float:
    """An exact sum (:func:`_exact` units) as the nearest float: ``math.fsum``'s result for
    the same values (CPython divides integers correctly rounded)."""
    return exact / (1 << _UNIT_BITS)


class LargestShare:
    """A multiset of floats that keeps the sum of its ``k`` largest, for
    ``k = max(1, ceil(n * share))`` as its size ``n`` changes, and its largest value.

    The ``k`` largest sit in a min-heap and the rest in a max-heap; a value removed is
    forgotten lazily (counted, and dropped when it reaches the top of its heap). Values
    equal to the boundary are interchangeable, so which heap holds them never changes a sum.
    """

    def __init__(self, share: float) -> None:
        self.share = share
        self._high: list[float] = []  # min-heap: the k largest
        self._low: list[float] = []  # max-heap of the rest, negated
        self._gone_high: Counter[float] = Counter()
        self._gone_low: Counter[float] = Counter()
        self._high_size = 0
        self._low_size = 0
        self._high_sum = 0  # exact, in _exact units
        self._largest: float | None = None  # None: to be found again in the high heap

    def __len__(self) -> int:
        return self._high_size + self._low_size

    def top_count(self) -> int:
        """``k``: how many of the values the top sum holds."""
        return top_count(len(self), self.share)

    def add(self, value: float) -> None:
        if self._high_size and value > self._high_min():
            self._push_high(value)
        else:
            heapq.heappush(self._low, -value)
            self._low_size += 1
        if self._largest is not None and value > self._largest:
            self._largest = value
        self._balance()

    def remove(self, value: float) -> None:
        """Forget one copy of ``value``, which the multiset holds."""
        if self._high_size and value >= self._high_min():
            self._gone_high[value] += 1
            self._high_size -= 1
            self._high_sum -= _exact(value)
        else:
            self._gone_low[value] += 1
            self._low_size -= 1
        if value == self._largest:
            self._largest = None
        self._balance()
        if len(self._high) + len(self._low) > 2 * len(self) + 64:  # mostly forgotten values
            self._compact()

    def top_sum(self) -> float:
        """The sum of the ``k`` largest values, correctly rounded (``math.fsum``'s)."""
        return _rounded(self._high_sum)

    def largest(self) -> float:
        """The largest value (the multiset is not empty)."""
        if self._largest is None:
            self._largest = max(self._live(self._high, self._gone_high))
        return self._largest

    def _high_min(self) -> float:
        self._prune(self._high, self._gone_high, 1.0)
        return self._high[0]

    def _push_high(self, value: float) -> None:
        heapq.heappush(self._high, value)
        self._high_size += 1
        self._high_sum += _exact(value)

    def _balance(self) -> None:
        # the largest value never moves: at least one value stays in the high heap while
        # any is held, and a value moved up is no larger than those there
        wanted = self.top_count() if len(self) else 0
        while self._high_size > wanted:
            self._prune(self._high, self._gone_high, 1.0)
            value = heapq.heappop(self._high)
            self._high_size -= 1
            self._high_sum -= _exact(value)
            heapq.heappush(self._low, -value)
            self._low_size += 1
        while self._high_size < wanted:
            self._prune(self._low, self._gone_low, -1.0)
            value = -heapq.heappop(self._low)
            self._low_size -= 1
            self._push_high(value)

    @staticmethod
    def _prune(heap: list[float], gone: Counter[float], sign: float) -> None:
        """Drop forgotten values from the top of ``heap`` (``sign``: how it stores them)."""
        while heap and gone[sign * heap[0]]:
            gone[sign * heapq.heappop(heap)] -= 1

    @staticmethod
    def _live(heap: list[float], gone: Counter[float]) -> list[float]:
        """The values ``heap`` holds that are not forgotten (``gone`` is left as it was)."""
        skip = Counter(gone)
        live = []
        for value in heap:
            if skip[value]:
                skip[value] -= 1
            else:
                live.append(value)
        return live

    def _compact(self) -> None:
        self._high = self._live(self._high, self._gone_high)
        self._low = [-value for value in self._live([-v for v in self._low], self._gone_low)]
        heapq.heapify(self._high)
        heapq.heapify(self._low)
        self._gone_high.clear()
        self._gone_low.clear()


class SumOfSquares:
    """The count of a multiset of floats and the sum of their squares (each square rounded
    to a float first, as ``value * value`` gives it), correctly rounded."""

    def __init__(self) -> None:
        self.count = 0
        self._sum = 0  # exact, in _exact units

    def add(self, value: float) -> None:
        self.count += 1
        self._sum += _exact(value * value)

    def remove(self, value: float) -> None:
        self.count -= 1
        self._sum -= _exact(value * value)

    def total(self) -> float:
        """``math.fsum`` of the squares."""
        return _rounded(self._sum)
