"""Embedders turn texts into vectors for the embedding metrics (coherence, loop detection)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from .._text import content_text
from ._local import LocalEmbedder

__all__ = ["Embedder", "HashingEmbedder"]


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to vectors.

    ``embed`` returns a float array of shape ``(len(texts), dim)``; a zero row says the
    embedder has no vector for the text (the metrics then take no cosine of it: the cases
    that need one are not scored). Rows need not be L2-normalised: the embedding metrics
    normalise them before taking a cosine.
    """

    @property
    def name(self) -> str:
        """Identifies the embedder and its settings (part of cache keys and metadata)."""
        ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed a batch of texts."""
        ...

    async def aembed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed a batch of texts without blocking the event loop."""
        ...


_PRIME = np.uint64(0x100000001B3)
_MIX = np.uint64(0xFF51AFD7ED558CCD)
_SEPARATOR = 0


class HashingEmbedder(LocalEmbedder):
    """Hashed character n-grams of a text's content words, signed, sublinear, L2-normalised.

    No model at all: texts that share content words (stop words removed) get similar
    vectors, a lexical proxy for meaning. The default embedder (:class:`StaticEmbedder`) is
    semantic and nearly as fast; this one suits texts where only shared words matter. The hash is a fixed polynomial
    over the UTF-8 bytes (not Python's salted ``hash``), so vectors are identical across
    processes and machines. A whole batch is hashed in a few NumPy passes.
    """

    def __init__(
        self, dim: int = 1024, ngram_sizes: Sequence[int] = (3, 4), cache_size: int = 4096
    ) -> None:
        if dim < 16:
            raise ValueError(f"dim must be at least 16, got {dim}")
        if not ngram_sizes or min(ngram_sizes) < 1:
            raise ValueError(f"ngram_sizes must be positive, got {list(ngram_sizes)}")
        super().__init__(cache_size)
        self.dim = dim
        self.ngram_sizes = tuple(sorted(set(ngram_sizes)))

    @property
    def name(self) -> str:
        sizes = "-".join(map(str, self.ngram_sizes))
        return f"hashing-char{sizes}-d{self.dim}"

    def _embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        count = len(texts)
        if count == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        # One byte buffer for the batch; a NUL byte separates texts so no n-gram spans two.
        words = [content_text(text) for text in texts]
        pieces = [f" {text} ".encode() if text else b"" for text in words]
        lengths = np.fromiter((len(p) + 1 for p in pieces), dtype=np.int64, count=count)
        raw = b"\x00".join(p.replace(b"\x00", b" ") for p in pieces) + b"\x00"
        data = np.frombuffer(raw, dtype=np.uint8).astype(np.uint64)
        owner = np.repeat(np.arange(count, dtype=np.int64), lengths)
        is_separator = data == _SEPARATOR
        buckets: list[npt.NDArray[np.int64]] = []
        signs: list[npt.NDArray[np.float64]] = []
        for size in self.ngram_sizes:
            windows = data.size - size + 1
            if windows <= 0:
                continue
            hashed = data[:windows] + np.uint64(size)
            crosses = is_separator[:windows].copy()
            for offset in range(1, size):
                hashed = hashed * _PRIME + data[offset : offset + windows]
                crosses |= is_separator[offset : offset + windows]
            keep = ~crosses
            hashed = hashed[keep]
            hashed ^= hashed >> np.uint64(31)
            hashed *= _MIX
            hashed ^= hashed >> np.uint64(33)
            column = (hashed % np.uint64(self.dim)).astype(np.int64)
            buckets.append(owner[:windows][keep] * self.dim + column)
            signs.append(1.0 - 2.0 * (hashed >> np.uint64(63)).astype(np.float64))
        vectors = np.zeros((count, self.dim), dtype=np.float32)
        if not buckets:
            return vectors
        counts = np.bincount(
            np.concatenate(buckets), weights=np.concatenate(signs), minlength=count * self.dim
        )
        # Transform only the cells that occur: a text touches a few hundred of its row's cells.
        cells = np.flatnonzero(counts)
        values = counts[cells]
        values = np.sign(values) * np.log1p(np.abs(values))
        rows = cells // self.dim
        norms = np.sqrt(np.bincount(rows, weights=values * values, minlength=count))
        scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
        vectors.reshape(-1)[cells] = values * scale[rows]
        return vectors
