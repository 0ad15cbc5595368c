"""Embeddings from an OpenAI-compatible ``/embeddings`` endpoint, batched, throttled, cached."""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import logging
import math
import os
import re
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from .._errors import (
    JudgeContextOverflowError,
    JudgeError,
    JudgeUnavailableError,
    JudgeUnsupportedRequestError,
)
from .._sync import run_sync
from ..judges._cache import JudgeCache, cache_key
from ..judges._openai import CONTEXT_WORDS, api_url, header_keys, scrub_keys
from ..judges._traffic import Traffic

__all__ = ["HTTPEmbedder"]

logger = logging.getLogger("agenteval")

MAX_CHARS = 8_000
"""Characters of a text that are embedded: OpenAI's embedding models take 8,192 tokens a
text, and a token is rarely shorter than a character, so the start of a longer text is
embedded rather than the request refused."""

MAX_BATCH_CHARS = 250_000
"""Characters one request may hold in all: OpenAI takes 300,000 tokens a request."""


class HTTPEmbedder:
    """An :class:`~agenteval_core.Embedder` over the OpenAI embeddings API (OpenAI, vLLM,
    Ollama, LiteLLM, ...). Texts go in batches of ``batch_size`` under the same traffic
    control as the judges; vectors are cached on disk by model and text (``cache=None``
    disables it) and L2-normalised.

    A text longer than ``max_chars`` has its first ``max_chars`` characters embedded (an
    agent's long answer would otherwise be refused, and with it every text of its batch),
    and a batch holds at most ``max_batch_chars`` characters. A model with a smaller input
    than OpenAI's 8,192 tokens needs a lower ``max_chars``; the error of a text still too
    long says so.

    A server that takes fewer texts a request than ``batch_size`` (text-embeddings-inference
    takes 32 by default) refuses a batch as too large: its parts are sent instead, as many
    texts each as the refusal says (else half), and ``batch_size`` is lowered to that.

    ``headers`` adds HTTP headers: Azure OpenAI takes its key as ``{"api-key": KEY}``.
    A vector the server gives with NaN or infinite values is returned as it is (the
    embedding metrics then fail the cases that use it) and never cached.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        batch_size: int = 64,
        requests_per_period: int = 10,
        period: float = 1.0,
        max_retries: int = 4,
        timeout: float = 20.0,
        cache: JudgeCache | None = None,
        max_chars: int = MAX_CHARS,
        max_batch_chars: int = MAX_BATCH_CHARS,
    ) -> None:
        for option, value in (("max_chars", max_chars), ("max_batch_chars", max_batch_chars)):
            if value < 1:
                raise ValueError(f"HTTPEmbedder: {option} must be >= 1, got {value}")
        self.max_chars = max_chars
        self.max_batch_chars = max_batch_chars
        self.model = model
        self.base_url = (
            base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        ).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.headers = dict(headers or {})
        if key:
            self.headers["Authorization"] = f"Bearer {key}"
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
        """One L2-normalised vector per text, in order (a zero vector stays zero), of its
        first ``max_chars`` characters: read from the cache, or asked of the server in
        batches under the traffic control."""
        sent = [text[: self.max_chars] for text in texts]  # what is embedded, and cached
        keys = [cache_key("embedding", self.model, text) for text in sent]
        found: dict[str, list[float]] = {}
        if self.cache is not None:  # off the event loop: SQLite waits on the disk
            hits = await self.cache.aget_many(set(keys))
            found = {key: hit["vector"] for key, hit in hits.items()}
        missing = list(dict.fromkeys(t for t, k in zip(sent, keys, strict=True) if k not in found))
        async with httpx.AsyncClient(timeout=self.timeout, headers=self.headers) as client:
            batches = self._batches(missing)
            results = await asyncio.gather(*(self._batch(client, batch) for batch in batches))
        fresh: dict[str, dict[str, Any]] = {}
        for batch, vectors in zip(batches, results, strict=True):
            for text, vector in zip(batch, vectors, strict=True):
                key = cache_key("embedding", self.model, text)
                found[key] = vector
                if all(map(math.isfinite, vector)):  # a broken vector is not kept for later
                    fresh[key] = {"vector": vector}
        if self.cache is not None and fresh:
            await self.cache.aput_many(fresh)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        matrix = np.array([found[key] for key in keys], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        # a zero row stays zero; a row with NaN or infinity stays unusable (NaN), never zero
        return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms != 0)

    def _batches(self, texts: list[str]) -> list[list[str]]:
        """``texts`` in order, in batches of at most ``batch_size`` texts and
        ``max_batch_chars`` characters (a text alone may reach ``max_chars``)."""
        batches: list[list[str]] = []
        size = 0
        for text in texts:
            full = size + len(text) > self.max_batch_chars
            if not batches or len(batches[-1]) == self.batch_size or full:
                batches.append([])
                size = 0
            batches[-1].append(text)
            size += len(text)
        return batches

    async def _batch(self, client: httpx.AsyncClient, batch: list[str]) -> list[list[float]]:
        url = api_url(self.base_url, "/embeddings")
        response = await self.traffic.send(
            functools.partial(client.post, url, json={"model": self.model, "input": batch})
        )
        if len(batch) > 1 and _batch_too_large(response):
            # the server takes fewer texts a request: as many as it says, else half; the
            # parts are sent on their own, and later batches are no larger
            size = _stated_limit(response, len(batch)) or len(batch) // 2
            if size < self.batch_size:
                self.batch_size = size
                logger.info(
                    "agenteval: %s refused %d texts in one request (HTTP %d: %s); sending "
                    "at most %d a request from now on",
                    url,
                    len(batch),
                    response.status_code,
                    self._scrub(response.text[:200]),
                    size,
                )
            parts = [batch[start : start + size] for start in range(0, len(batch), size)]
            vectors = await asyncio.gather(*(self._batch(client, part) for part in parts))
            return [vector for part in vectors for vector in part]
        if response.status_code >= 400:
            raise self._refusal(response, url)
        try:
            return _vectors(response, len(batch))
        except _Malformed as exc:
            raise JudgeUnsupportedRequestError(
                self._scrub(
                    f"{url} answered HTTP {response.status_code} with no usable embeddings: "
                    f"{exc} (the body begins {response.text[:200]!r}); is base_url the root "
                    "of an OpenAI-compatible API, such as http://localhost:8000/v1?"
                )
            ) from None

    def _refusal(self, response: httpx.Response, url: str) -> JudgeError:
        """The error an HTTP error status is, by what embedding again could do about it."""
        body = response.text[:300]
        status = response.status_code
        if status >= 500 or status == 429:  # retried already
            return JudgeUnavailableError(self._scrub(f"HTTP {status} from {url}: {body}"))
        if CONTEXT_WORDS.search(response.text[:4000]):
            return JudgeContextOverflowError(
                self._scrub(
                    f"{self.model} refuses a text of up to {self.max_chars} characters as too "
                    f"long (HTTP {status}: {body}); pass HTTPEmbedder(max_chars=...) below its "
                    "input limit"
                )
            )
        return JudgeUnsupportedRequestError(
            self._scrub(
                f"HTTP {status} from {url}: {body}; embedding again gives the same: check the "
                "model, the API key and max_batch_chars"
            )
        )

    def _scrub(self, text: str) -> str:
        return scrub_keys(text, header_keys(self.headers))


_BATCH_LIMIT_WORDS = re.compile(
    r"batch[ _]?size|too many (?:inputs|texts|items)|batch .{0,40}(?:larger|exceed|maximum)",
    re.IGNORECASE,
)
"""How a server's refusal says a request held more texts than it takes: text-embeddings-
inference's "batch size 64 > maximum allowed batch size 32" (HTTP 413 or 422), DashScope's
"batch size is invalid, it should not be larger than 10" (HTTP 400)."""


def _batch_too_large(response: httpx.Response) -> bool:
    """A refusal of the request's size, which fewer texts a request avoids: HTTP 413 (too
    many texts, or a body over the server's payload limit), or a 400 or 422 that says the
    batch is too large."""
    if response.status_code == 413:
        return True
    return response.status_code in (400, 422) and bool(
        _BATCH_LIMIT_WORDS.search(response.text[:2000])
    )


_STATED_LIMIT = re.compile(
    r"(?:maximum allowed batch size|larger than|at most|max(?:imum)?[ _]batch[ _]size)"
    r"\D{0,12}?(\d+)",
    re.IGNORECASE,
)


def _stated_limit(response: httpx.Response, sent: int) -> int | None:
    """The number of texts a refusal says a request may hold, when it says one below
    ``sent`` ("... > maximum allowed batch size 32")."""
    found = _STATED_LIMIT.search(response.text[:2000])
    limit = int(found.group(1)) if found else 0
    return limit if 0 < limit < sent else None


class _Malformed(Exception):
    """A successful response that holds no usable embeddings: what is wrong with it."""


def _vectors(response: httpx.Response, count: int) -> list[list[float]]:
    """The ``count`` embeddings of an embeddings response, in the order of the texts sent.

    As OpenAI's API gives them (an ``index`` for each, vectors of floats) or as servers
    that follow it loosely do: no ``index`` (the order given), or a vector base64-encoded
    (little-endian float32, what ``encoding_format="base64"`` returns)."""
    try:
        body = response.json()
    except ValueError:
        raise _Malformed(f"the body is not JSON ({response.headers.get('content-type')})") from None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise _Malformed("no 'data' list of embedding objects")
    if len(data) != count:
        raise _Malformed(f"{len(data)} embeddings for {count} texts")
    indices = [item.get("index") for item in data]
    if all(index is None for index in indices):
        ordered = data
    elif sorted(map(str, indices)) == sorted(map(str, range(count))):
        ordered = sorted(data, key=lambda item: int(item["index"]))
    else:
        raise _Malformed(f"the indices {indices[:10]} are not 0 to {count - 1}")
    vectors = [_vector(item.get("embedding"), position) for position, item in enumerate(ordered)]
    sizes = {len(vector) for vector in vectors}
    if len(sizes) > 1:
        raise _Malformed(f"vectors of different lengths {sorted(sizes)}")
    return vectors


def _vector(embedding: Any, position: int) -> list[float]:
    if isinstance(embedding, str):
        try:
            raw = base64.b64decode(embedding, validate=True)
        except (binascii.Error, ValueError):
            raise _Malformed(f"embedding {position} is text that is not base64") from None
        if not raw or len(raw) % 4:
            raise _Malformed(f"embedding {position} is base64 of {len(raw)} bytes, no float32s")
        return np.frombuffer(raw, dtype="<f4").astype(float).tolist()
    if (
        not isinstance(embedding, list)
        or not embedding
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in embedding)
    ):
        shown = repr(embedding)[:60]
        raise _Malformed(f"embedding {position} is {shown}, not a list of numbers")
    return [float(x) for x in embedding]
