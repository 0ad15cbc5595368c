"""What the in-process embedders share: a batch interface with a cache of recent texts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["LocalEmbedder"]


class LocalEmbedder:
    """An embedder that runs in this process. Subclasses give ``dim``, ``name`` and
    ``_embed_batch`` (texts it has not seen lately → L2-normalised rows).

    Loop detection re-embeds a session's recent outputs for every new trace, and coherence
    embeds the same output again: a small cache of recent texts saves that work.
    """

    dim: int

    def __init__(self, cache_size: int = 4096) -> None:
        self.cache_size = cache_size
        self._cache: dict[str, npt.NDArray[np.float32]] = {}

    @property
    def name(self) -> str:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        # sent to another process (a replay's workers) without its cache: vectors are
        # cheap to make again, and a full cache is megabytes
        state = self.__dict__.copy()
        state["_cache"] = {}
        return state

    def _embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise NotImplementedError

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed a batch of texts: float32 rows, L2-normalised (zero for empty text)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        cache = self._cache
        missing = list(dict.fromkeys(text for text in texts if text not in cache))
        if not missing:  # a metric's texts, embedded with its batch: the usual case
            return np.array([cache[text] for text in texts], dtype=np.float32)
        known = {text: cache[text] for text in texts if text in cache}
        fresh = dict(zip(missing, self._embed_batch(missing), strict=True))
        if len(cache) + len(fresh) > self.cache_size:
            self._cache = {}
        if len(fresh) <= self.cache_size:
            self._cache.update(fresh)
        known.update(fresh)
        # np.array, not np.stack: the same rows, without np.stack's checks per call
        return np.array([known[text] for text in texts], dtype=np.float32)

    async def aembed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed a batch of texts. Runs inline: a batch takes microseconds per text, and
        handing it to a thread would cost more than it saves."""
        return self.embed(texts)
