"""Embeddings from an OpenAI-compatible ``/embeddings`` endpoint, batched, throttled, cached."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from .._errors import JudgeUnavailableError
from .._sync import run_sync
from ..judges._cache import JudgeCache, cache_key
from ..judges._traffic import Traffic

__all__ = ["HTTPEmbedder"]


class HTTPEmbedder:
    """An :class:`~agenteval_core.Embedder` over the OpenAI embeddings API (OpenAI, vLLM,
    Ollama, LiteLLM, ...). Texts go in batches of ``batch_size`` under the same traffic
    control as the judges; vectors are cached on disk by model and text (``cache=None``
    disables it) and L2-normalised."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int = 64,
        requests_per_period: int = 10,
        period: float = 1.0,
        max_retries: int = 4,
        timeout: float = 20.0,
        cache: JudgeCache | None = None,
    ) -> None:
        self.model = model
        self.base_url = (
            base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        ).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.batch_size = batch_size
        self.timeout = timeout
        self.cache = cache
        self.traffic = Traffic(
            requests_per_period=requests_per_period, period=period, max_retries=max_retries
        )

    @property
    def name(self) -> str:
        return f"http:{self.model}"

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Blocking form of :meth:`aembed`; safe to call from inside a running event loop
        (it then runs on a private loop in a worker thread)."""
        return run_sync(self.aembed(texts))

    async def aembed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        keys = [cache_key("embedding", self.model, text) for text in texts]
        found: dict[str, list[float]] = {}
        if self.cache is not None:  # off the event loop: SQLite waits on the disk
            hits = await self.cache.aget_many(set(keys))
            found = {key: hit["vector"] for key, hit in hits.items()}
        missing = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in found))
        async with httpx.AsyncClient(timeout=self.timeout, headers=self.headers) as client:
            batches = [
                missing[i : i + self.batch_size] for i in range(0, len(missing), self.batch_size)
            ]
            results = await asyncio.gather(*(self._batch(client, batch) for batch in batches))
        fresh: dict[str, dict[str, Any]] = {}
        for batch, vectors in zip(batches, results, strict=True):
            for text, vector in zip(batch, vectors, strict=True):
                key = cache_key("embedding", self.model, text)
                found[key] = vector
                fresh[key] = {"vector": vector}
        if self.cache is not None and fresh:
            await self.cache.aput_many(fresh)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        matrix = np.array([found[key] for key in keys], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)

    async def _batch(self, client: httpx.AsyncClient, batch: list[str]) -> list[list[float]]:
        url = f"{self.base_url}/embeddings"
        response = await self.traffic.send(
            functools.partial(client.post, url, json={"model": self.model, "input": batch})
        )
        if response.status_code >= 400:
            raise JudgeUnavailableError(
                f"HTTP {response.status_code} from {url}: {response.text[:300]}"
            )
        data = sorted(response.json()["data"], key=lambda item: item["index"])
        if len(data) != len(batch):
            raise JudgeUnavailableError(
                f"{url} returned {len(data)} embeddings for {len(batch)} texts"
            )
        return [item["embedding"] for item in data]
