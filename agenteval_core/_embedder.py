"""Embedders turn texts into vectors for the embedding metrics (coherence, loop detection)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["Embedder"]


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to vectors.

    ``embed`` returns a float32 array of shape ``(len(texts), dim)`` whose non-zero rows are
    L2-normalised; an empty text may map to a zero row (metrics treat it as distance 1).
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
