"""Lexical tokens for Jaccard similarity and answer-uses-result checks."""

from __future__ import annotations

import functools
import re

__all__ = ["STOP_WORDS", "content_text", "content_tokens", "jaccard"]

_WORD = re.compile(r"\w+")

STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves
    """.split()
)
"""A fixed English stop-word list, so token sets do not change with library versions."""


def _content_words(text: str) -> list[str]:
    return [
        word for word in _WORD.findall(text.lower()) if len(word) > 1 and word not in STOP_WORDS
    ]


@functools.lru_cache(maxsize=4096)
def content_tokens(text: str) -> frozenset[str]:
    """Lower-cased ``\\w+`` words of ``text`` minus stop words and one-letter tokens."""
    return frozenset(_content_words(text))


def content_text(text: str) -> str:
    """The content words of ``text`` in order, lower-cased and joined by single spaces."""
    return " ".join(_content_words(text))


def jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets give 0 (nothing shared, so no evidence of repetition)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0
