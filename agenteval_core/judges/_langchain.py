"""A judge backed by any LangChain chat model (the provider you already use)."""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
from collections.abc import Iterator
from typing import Any

import httpx
from pydantic import BaseModel, SecretStr

from .._errors import (
    JudgeContextOverflowError,
    JudgeError,
    JudgeUnavailableError,
    JudgeUnsupportedRequestError,
)
from .._fork import renew_after_fork
from ._base import DEFAULT_CACHE, BaseJudge, Completion
from ._cache import JudgeCache
from ._openai import CONTEXT_WORDS, refusal_completion, scrub_keys
from ._parse import reply_text
from ._pricing import Price
from ._traffic import RETRY_STATUSES, reported_code

__all__ = ["LangChainJudge"]

DEFAULT_CLIENT_RETRIES = 2
"""How many times a chat model's client retries an HTTP error when the model does not say
(``max_retries``: the OpenAI and Anthropic SDKs' default)."""
BODY_RETRY_BASE = 0.25
"""Seconds: the n-th retry of an error a 200 reply reported waits up to this × 2ⁿ."""

_ROLES = {"system": "system", "user": "human", "assistant": "ai"}


class _ModelLoop:
    """The event loop, on a daemon thread of its own, that every LangChain judge's model
    runs on, from the first call to the end of the process (renewed in a forked child,
    which has neither the thread nor, perhaps, a free lock).

    Provider clients keep HTTP connections bound to the loop they were first used on
    (langchain-openai and langchain-anthropic share one client per process): called from
    a new loop each time, as a synchronous ``measure`` does, every other call failed with
    "Connection error". On one loop of their own they always meet the same one."""

    _loop: asyncio.AbstractEventLoop | None
    _lock: threading.Lock

    def __init__(self) -> None:
        self._after_fork()
        renew_after_fork(self)

    def get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="agenteval-langchain-judge", daemon=True
                ).start()
                self._loop = loop
            return self._loop

    def _after_fork(self) -> None:
        self._loop = None
        self._lock = threading.Lock()


_MODEL_LOOP = _ModelLoop()


# how providers say why a reply ended, as LangChain passes it on in response_metadata
# (finish_reason: OpenAI, Azure, Gemini; stop_reason: Anthropic)
_CUT_AT_LIMIT = frozenset({"length", "max_tokens", "MAX_TOKENS"})
_FILTERED = frozenset({"content_filter", "SAFETY", "PROHIBITED_CONTENT"})


class LangChainJudge(BaseJudge):
    """Judges with a LangChain ``BaseChatModel``: ``LangChainJudge(ChatOpenAI(...))``.

    The reply text is parsed with the same tolerant parser and re-ask logic as
    :class:`OpenAIJudge`; token usage comes from the message's ``usage_metadata``.
    LangChain is imported only by the model you pass in, never by agenteval's core.
    """

    def __init__(
        self,
        chat_model: Any,
        *,
        model_name: str | None = None,
        max_parse_retries: int = 2,
        cache: JudgeCache | None = DEFAULT_CACHE,
        prices: dict[str, Price] | None = None,
        share_stages: bool = True,
        budget_usd: float | None = None,
        budget_usd_per_hour: float | None = None,
    ) -> None:
        super().__init__(
            cache=cache,
            max_parse_retries=max_parse_retries,
            prices=prices,
            share_stages=share_stages,
            budget_usd=budget_usd,
            budget_usd_per_hour=budget_usd_per_hour,
        )
        self.chat_model = chat_model
        self._model = model_name or str(
            getattr(chat_model, "model_name", None)
            or getattr(chat_model, "model", None)
            or type(chat_model).__name__
        )
        self._require_price()

    @property
    def model(self) -> str:
        return self._model

    async def _complete(
        self, messages: list[dict[str, str]], schema: type[BaseModel]
    ) -> Completion:
        prompt = [(_ROLES[m["role"]], m["content"]) for m in messages]
        # the model's client retries an HTTP error itself, but not an error a 200 reply's
        # body reports (OpenRouter's, once the model started): those are retried here, as
        # many times as the client would retry
        retries = getattr(self.chat_model, "max_retries", None)
        retries = retries if isinstance(retries, int) else DEFAULT_CLIENT_RETRIES
        for attempt in itertools.count(1):
            call = asyncio.run_coroutine_threadsafe(
                self.chat_model.ainvoke(prompt), _MODEL_LOOP.get()
            )
            try:  # cancelled here (a deadline, a closing run), the call is cancelled there
                reply = await asyncio.wrap_future(call)
                break
            except Exception as exc:  # the provider's own errors, by what trying again can do
                for cause in _chain(exc):  # an SDK's error keeps the HTTP response it was
                    response = getattr(cause, "response", None)
                    if isinstance(response, httpx.Response):
                        refused = refusal_completion(response, messages)
                        if refused is not None:
                            return refused
                error = self._judge_error(exc)
                in_body = any(_reported(cause) is not None for cause in _chain(exc))
                if in_body and isinstance(error, JudgeUnavailableError) and attempt <= retries:
                    await asyncio.sleep(random.uniform(0, BODY_RETRY_BASE * 2**attempt))
                    continue
                error.usage.calls = attempt  # the client's own retries are its own affair
                raise error from exc
        usage = getattr(reply, "usage_metadata", None) or {}
        details = usage.get("input_token_details") or {}
        metadata = getattr(reply, "response_metadata", None) or {}
        finish = metadata.get("finish_reason") or metadata.get("stop_reason")
        return Completion(
            text=reply_text(reply.content),
            input_tokens=int(usage.get("input_tokens", 0)),
            output_tokens=int(usage.get("output_tokens", 0)),
            # LangChain's count of the prompt tokens read from the provider's cache
            cached_input_tokens=int(details.get("cache_read", 0) or 0),
            cut_at_limit=finish in _CUT_AT_LIMIT,
            filtered=f"withheld the reply (finish reason {finish})"
            if finish in _FILTERED
            else None,
            refusal="the model stopped with stop reason 'refusal'" if finish == "refusal" else None,
        )

    def _judge_error(self, exc: Exception) -> JudgeError:
        """A provider's error (openai's, anthropic's, httpx's, as LangChain raises them) as
        the judge error of its kind: what ``OpenAIJudge`` retries (a rate limit, a server
        error, a lost connection, a timeout) is "judge unavailable" (replaying may help); a context overflow says so;
        another refusal (a wrong key or model) is an "unsupported request". Never a metric
        bug, and never with the model's API key in it (a server may echo it back)."""
        text = scrub_keys(f"{type(exc).__name__}: {exc}", _secrets(self.chat_model))
        message = f"{self.model}: {text}"
        status = next(
            (code for error in _chain(exc) if isinstance(code := _status(error), int)), None
        )
        if status in RETRY_STATUSES or (status is not None and status >= 500):
            return JudgeUnavailableError(message)
        if status is not None and CONTEXT_WORDS.search(text):
            return JudgeContextOverflowError(message)
        if status is not None and status >= 400:
            return JudgeUnsupportedRequestError(message)
        if any(_transient(error) for error in _chain(exc)):
            return JudgeUnavailableError(message)
        return JudgeError(message)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors it was raised from (LangChain wraps the provider's)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _status(error: BaseException) -> object:
    """The HTTP status an SDK's error carries (``status_code``, or its response's), or the
    code of the error a 200 reply's body reported: langchain-openai raises that body's
    ``error`` object as a ``ValueError`` (OpenRouter's ``{"code": 502, ...}`` when the
    model fails while answering)."""
    status = getattr(error, "status_code", None)
    if status is None:
        status = getattr(getattr(error, "response", None), "status_code", None)
    return _reported(error) if status is None else status


def _reported(error: BaseException) -> int | None:
    """The code of the error a 200 reply's body reported, which langchain-openai raises as
    a ``ValueError`` of the body's ``error`` object; None for any other error."""
    reported = error.args[0] if isinstance(error, ValueError) and error.args else None
    return reported_code(reported) if isinstance(reported, dict) else None


def _transient(error: BaseException) -> bool:
    """A lost connection or a timeout: the SDKs name their own classes so
    (``APIConnectionError``, ``APITimeoutError``, httpx's ``ConnectTimeout``)."""
    if isinstance(error, TimeoutError | ConnectionError):
        return True
    return any(
        "Connection" in kind.__name__ or "Timeout" in kind.__name__ for kind in type(error).__mro__
    )


def _secrets(chat_model: Any) -> list[str]:
    """The model's API keys: LangChain keeps them as ``SecretStr`` fields."""
    fields = vars(chat_model).values() if hasattr(chat_model, "__dict__") else ()
    return [value.get_secret_value() for value in fields if isinstance(value, SecretStr)]
