"""Traffic control shared by every HTTP client: rate limit, concurrency bound, retries."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from asyncio_throttle import Throttler

from .._errors import JudgeUnavailableError

__all__ = [
    "RETRY_AFTER_MAX",
    "RETRY_STATUSES",
    "UPSTREAM_FAILED",
    "Traffic",
    "TrafficStats",
    "reported_code",
    "reported_status",
    "retry_after_seconds",
]

T = TypeVar("T")
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
RETRY_AFTER_MAX = 120.0
"""The longest ``Retry-After`` honoured, in seconds; a longer one is waited this long."""
logger = logging.getLogger("agenteval")


def retry_after_seconds(response: httpx.Response) -> float | None:
    """Seconds the server asks to wait, if it says: ``retry-after-ms`` (Azure OpenAI and
    OpenAI send it beside ``Retry-After``, which they round to whole seconds; some gateways
    send it alone), else ``Retry-After`` (a number of seconds or an HTTP date)."""
    milliseconds = response.headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            wait = float(milliseconds) / 1000.0
        except ValueError:
            wait = math.nan
        if math.isfinite(wait):
            return max(0.0, wait)
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


UPSTREAM_FAILED = 502
"""The status of an error a 200 response's body reports without a usable code of its own."""


def reported_status(response: httpx.Response) -> httpx.Response:
    """``response`` with the status its body reports, when it is a 200 whose body is an
    error: OpenRouter answers 200 once a model has started, and a model that fails while
    answering sends ``{"error": {"code": 502, "message": ...}}`` in the body, or a choice
    that ended with ``finish_reason: "error"``. Read as the error it reports, it is retried
    or refused as that status is, instead of reading as a reply that matches no schema."""
    if response.status_code != 200 or b'"error"' not in response.content:
        return response
    try:
        body = response.json()
        error, choices = body.get("error"), body.get("choices")
        if choices:  # a reply; an error only when its choice says it ended in one
            if choices[0].get("finish_reason") != "error":
                return response
            error = choices[0].get("error") or error or {}
        elif not error:
            return response
    except (ValueError, AttributeError, IndexError, KeyError, TypeError):
        return response
    return httpx.Response(
        reported_code(error),
        headers=response.headers,
        content=response.content,
        request=response.request,
    )


def reported_code(error: Any) -> int:
    """The HTTP status an error object a 200 body held reports: its ``code`` when that is
    an error status, else :data:`UPSTREAM_FAILED`."""
    code = error.get("code") if isinstance(error, dict) else None
    return code if type(code) is int and 400 <= code <= 599 else UPSTREAM_FAILED


@dataclass
class TrafficStats:
    """What went over the wire: calls made, retries, and why."""

    calls: int = 0
    retries: int = 0
    failures: dict[str, int] = field(default_factory=dict)


class Traffic:
    """At most ``requests_per_period`` requests per ``period`` seconds (asyncio-throttle),
    at most ``max_concurrency`` in flight, and retries with exponential backoff and full
    jitter (capped at ``backoff_max``) on 429, 5xx, timeouts and connection errors. A
    ``Retry-After`` header is honoured up to ``retry_after_max`` (120 s). Every retry is
    logged at INFO on the ``agenteval`` logger with its reason and wait.

    Throttlers and semaphores belong to one event loop, so each loop gets its own.
    """

    def __init__(
        self,
        *,
        requests_per_period: int = 10,
        period: float = 1.0,
        max_concurrency: int = 8,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        retry_after_max: float = RETRY_AFTER_MAX,
        retry_timeouts: bool = False,
    ) -> None:
        self.requests_per_period = requests_per_period
        self.period = period
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.retry_after_max = retry_after_max
        self.retry_timeouts = retry_timeouts
        """Whether a request that timed out is sent again. Off by default: a server that
        took too long is usually still generating for the client that left (a local model
        serves one request at a time), and a retry queues behind it."""
        self.stats = TrafficStats()
        self.sleep = asyncio.sleep  # the wait between attempts (a test can replace it)
        self.pace: Callable[[], Awaitable[None]] | None = None
        """Awaited before each request on top of this process's own limit: a limiter that
        several processes share (Ray replay's one limiter per judge endpoint)."""
        # keyed by the loop object itself: a finished loop's id can be reused by a new loop
        self._per_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[Throttler, asyncio.Semaphore]
        ] = weakref.WeakKeyDictionary()

    # limits belong to one process's event loops: another process (a replay worker, a Ray
    # actor) gets the settings and makes its own
    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_per_loop"] = None
        state["stats"] = TrafficStats()
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._per_loop = weakref.WeakKeyDictionary()

    def _limits(self) -> tuple[Throttler, asyncio.Semaphore]:
        key = asyncio.get_running_loop()
        limits = self._per_loop.get(key)
        if limits is None:
            limits = (
                Throttler(rate_limit=self.requests_per_period, period=self.period),
                asyncio.Semaphore(self.max_concurrency),
            )
            self._per_loop[key] = limits
        return limits

    def _note(self, reason: str) -> None:
        self.stats.failures[reason] = self.stats.failures.get(reason, 0) + 1

    async def send(
        self,
        request: Callable[[], Awaitable[httpx.Response]],
        *,
        final: Callable[[httpx.Response], bool] | None = None,
    ) -> httpx.Response:
        """Send with throttling and retries. Returns the first response that is not worth
        retrying (a success, or e.g. a 400, or one ``final`` says retrying cannot fix);
        raises ``JudgeUnavailableError`` when retries run out."""
        throttler, semaphore = self._limits()
        kind = last_problem = "no attempt made"
        for attempt in range(self.max_retries + 1):
            wait: float | None = None
            async with semaphore, throttler:
                if self.pace is not None:
                    await self.pace()
                self.stats.calls += 1
                try:
                    response = reported_status(await request())
                except httpx.TimeoutException as exc:
                    kind = "timed out"
                    last_problem = f"{kind} ({_where(exc)})"
                    if not self.retry_timeouts:
                        self._note(kind)
                        error = JudgeUnavailableError(
                            "timed out; not sent again, since the server may still be "
                            "working on it (raise --judge-timeout for a slow server)"
                        )
                        error.usage.abandoned = 1
                        raise error from None
                except httpx.TransportError as exc:
                    kind = f"connection error ({type(exc).__name__})"
                    last_problem = f"{kind} to {_where(exc)}"
                else:
                    if response.status_code not in RETRY_STATUSES or (
                        final is not None and final(response)
                    ):
                        return response  # success, or an error retrying cannot fix
                    kind = f"HTTP {response.status_code}"
                    last_problem = f"{kind} from {_where(response)}: {response.text[:200]}"
                    wait = retry_after_seconds(response)
            self._note(kind)
            if attempt == self.max_retries:
                break
            self.stats.retries += 1
            if wait is None:
                wait = random.uniform(0, min(self.backoff_max, self.backoff_base * 2**attempt))
            else:  # the server said how long: honour it, up to retry_after_max
                wait = min(wait, self.retry_after_max)
            logger.info(
                "agenteval: judge request failed (%s); retry %d of %d in %.1f s",
                last_problem[:200],
                attempt + 1,
                self.max_retries,
                wait,
            )
            await self.sleep(wait)
        raise JudgeUnavailableError(
            f"gave up after {self.max_retries + 1} attempts; last: {last_problem}"
        )


def _where(sent: httpx.Response | httpx.RequestError) -> str:
    """The URL a response or a failed request was for: an error that names it says which
    server to check (an evaluator's judge is configured far from where it fails)."""
    try:
        return str(sent.request.url)
    except RuntimeError:  # made without a request (a test's response, a transport's own)
        return "the server"
