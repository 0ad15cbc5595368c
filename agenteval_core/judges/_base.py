"""The judge logic every transport shares: cache, ask, parse, re-ask, account."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import time
from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from .._errors import (
    JudgeBudgetError,
    JudgeConfigError,
    JudgeError,
    JudgeInvalidAnswerError,
    JudgeParseError,
    JudgeUsage,
)
from .._redact import redact_text
from ._cache import JudgeCache, cache_key
from ._parse import ReplyError, parse_reply
from ._pricing import DEFAULT_PRICES, Price, cost_usd
from ._protocol import JudgeReply, JudgeRequest

__all__ = [
    "DEFAULT_CACHE",
    "BaseJudge",
    "Completion",
    "JudgeStats",
    "SharedSpend",
    "json_schema",
    "spends_against_budget",
]

T = TypeVar("T", bound=BaseModel)


@functools.cache
def json_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """A reply schema's JSON schema, built once per schema class (it is asked per request)."""
    return schema.model_json_schema()


class _DefaultCache:
    def __repr__(self) -> str:
        return "DEFAULT_CACHE"


DEFAULT_CACHE: Any = _DefaultCache()
"""Use the on-disk cache at its default location (``cache=None`` disables caching)."""


@dataclass
class Completion:
    """One raw answer from a transport."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those the provider read from its prompt cache (billed lower)."""
    calls: int = 1
    """Requests the transport made for it (retries included)."""
    usage_estimated: bool = False
    """The server's token counts were not usable (malformed or negative): the counts are
    estimated from characters (/ 4)."""
    cut_at_limit: bool = False
    """The reply stopped at the request's token limit (OpenAI's ``finish_reason`` "length")."""
    refusal: str | None = None
    """Why the model declined to answer, when it says so apart from its reply (OpenAI's
    structured outputs give ``message.refusal`` and no content)."""
    filtered: str | None = None
    """What the provider's content filter did, when it stopped the call: "withheld the
    reply (finish reason content_filter)" (Azure OpenAI; ``SAFETY``: Gemini), or "refused
    the prompt (...)" (Azure OpenAI's HTTP 400)."""


@dataclass
class JudgeStats:
    """Counts a run can be checked against."""

    requests: int = 0
    completions: int = 0
    cache_hits: int = 0
    reasks: int = 0
    unparsable: int = 0
    shared: int = 0
    """Requests answered with another metric's answer to the same shared stage."""
    spent_usd: float = 0.0
    """Estimated spend of the calls made (from token counts and prices)."""
    over_budget: int = 0
    """Requests refused because the budget was used up."""
    probes: int = 0
    """Requests the preflight check sent to find the output mode the server accepts."""
    estimated_usage: int = 0
    """Completions whose reported usage was malformed or negative (``"lots"``, ``1e309``,
    ``-5``): the verdict was kept and its tokens estimated from characters (/ 4)."""


_SHARED_ANSWERS = 4096
"""Answers to shared stages kept in memory (most recent first): enough for every trace in
flight, small enough not to matter."""


def _checked_prices(prices: dict[str, Price]) -> dict[str, Price]:
    """``prices`` as given, each checked: two or three finite figures of at least 0."""
    for model, price in prices.items():
        if not (
            isinstance(price, tuple | list)
            and len(price) in (2, 3)
            and all(
                isinstance(figure, int | float)
                and not isinstance(figure, bool)
                and math.isfinite(figure)
                and figure >= 0
                for figure in price
            )
        ):
            raise JudgeConfigError(
                f"the price of {model!r} is {price!r}; give USD per million tokens as "
                "(input, output), or (input, output, cached input), each a number >= 0"
            )
    return dict(prices)


class SharedSpend(Protocol):
    """A judge's spend kept for several processes at once (a replay's workers, its Ray
    scorers), so that one ``budget_usd`` holds for all of them together."""

    async def total(self) -> float:
        """What every process has spent so far, in US dollars."""
        ...

    def add(self, usd: float) -> None:
        """Add this process's spend on one call."""
        ...


def spends_against_budget(judge: Any) -> bool:
    """Whether ``judge`` keeps a ``budget_usd`` that a replay sending it to several
    processes should hold for all of them (see :class:`SharedSpend`)."""
    return getattr(judge, "budget_usd", None) is not None and hasattr(judge, "shared_spend")


class BaseJudge(ABC):
    """Caching, parsing and re-asking, written once; subclasses only move text (``_complete``)."""

    def __init__(
        self,
        *,
        cache: JudgeCache | None = DEFAULT_CACHE,
        max_parse_retries: int = 2,
        prices: dict[str, Price] | None = None,
        share_stages: bool = True,
        budget_usd: float | None = None,
        budget_usd_per_hour: float | None = None,
    ) -> None:
        self.cache: JudgeCache | None = JudgeCache() if cache is DEFAULT_CACHE else cache
        self.max_parse_retries = max_parse_retries
        self.prices = DEFAULT_PRICES | _checked_prices(prices or {})
        self.share_stages = share_stages
        self.budget_usd = budget_usd
        self.budget_usd_per_hour = budget_usd_per_hour
        self.shared_spend: SharedSpend | None = None
        """Set by a replay that sends this judge to several processes: ``budget_usd`` then
        holds for their spend together."""
        self.stats = JudgeStats()
        self._spent_lately: deque[tuple[float, float]] = deque()  # (when, USD) in the last hour
        # answers to shared stages: asked once, handed to every metric that asks the same
        self._shared: OrderedDict[str, JudgeReply[Any]] = OrderedDict()
        self._shared_pending: dict[tuple[int, str], asyncio.Future[JudgeReply[Any]]] = {}

    # A judge goes to other processes (replay workers, Ray actors) as its settings: answers
    # being shared, counts and spend start afresh there (the replay shares its spend with
    # them, where a budget is kept)
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["shared_spend"] = None
        state["stats"] = JudgeStats()
        state["_spent_lately"] = deque()
        state["_shared"] = OrderedDict()
        state["_shared_pending"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _require_price(self) -> None:
        """A budget needs a price: without one, spend cannot be estimated."""
        if (self.budget_usd is not None or self.budget_usd_per_hour is not None) and (
            self.model not in self.prices
        ):
            raise JudgeConfigError(
                f"a judge budget needs the price of {self.model!r}, which agenteval does not "
                "know; pass prices={model: (USD per million input tokens, per million output "
                "tokens)}"
            )

    @property
    @abstractmethod
    def model(self) -> str:
        """The judge model's name."""

    @abstractmethod
    async def _complete(
        self, messages: list[dict[str, str]], schema: type[BaseModel]
    ) -> Completion:
        """Send chat messages, return the reply text and token counts."""

    async def judge(self, request: JudgeRequest[T]) -> JudgeReply[T]:
        """Ask (or read the cache), parse into ``request.schema``, re-ask on a bad reply.

        A shared request (``request.shared``) asked again, or while it is in flight, gets the
        first answer, marked ``shared`` with no tokens or cost of its own.

        Raises ``JudgeParseError`` (with the raw reply) after ``max_parse_retries`` re-asks,
        or ``JudgeUnavailableError`` from the transport.
        """
        self.stats.requests += 1
        key = cache_key(
            self.model,
            request.metric,
            request.prompt_version,
            request.messages,
            json_schema(request.schema),
        )
        if not (request.shared and self.share_stages):
            return await self._ask(request, key)
        known = self._shared.get(key)
        if known is not None:
            self._shared.move_to_end(key)
            self.stats.shared += 1
            return self._handed_on(known)
        loop_key = (id(asyncio.get_running_loop()), key)
        pending = self._shared_pending.get(loop_key)
        if pending is not None:  # the same question is being asked right now: wait for it
            self.stats.shared += 1
            return self._handed_on(await asyncio.shield(pending))
        future: asyncio.Future[JudgeReply[Any]] = asyncio.get_running_loop().create_future()
        self._shared_pending[loop_key] = future
        try:
            reply = await self._ask(request, key)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, nobody else has to
            raise
        finally:
            self._shared_pending.pop(loop_key, None)
        future.set_result(reply)
        self._shared[key] = reply
        if len(self._shared) > _SHARED_ANSWERS:
            self._shared.popitem(last=False)
        return reply

    async def _check_budget(self) -> None:
        """Refuse a new call once the budget is used up (calls in flight finish): the spend
        of every process the judge was sent to, where a replay shares it."""
        if self.budget_usd is not None:
            shared = self.shared_spend
            spent = self.stats.spent_usd if shared is None else await shared.total()
            if spent >= self.budget_usd:
                self.stats.over_budget += 1
                everyone = "" if shared is None else " (every process of the replay together)"
                raise JudgeBudgetError(
                    f"budget exhausted: the judge spent ${spent:.6f} of its "
                    f"${self.budget_usd:.6f} budget{everyone}"
                )
        if self.budget_usd_per_hour is not None:
            hour_ago = time.monotonic() - 3600
            while self._spent_lately and self._spent_lately[0][0] < hour_ago:
                self._spent_lately.popleft()
            lately = sum(usd for _, usd in self._spent_lately)
            if lately >= self.budget_usd_per_hour:
                self.stats.over_budget += 1
                raise JudgeBudgetError(
                    f"budget exhausted: this hour the judge spent ${lately:.6f} of its "
                    f"${self.budget_usd_per_hour:.6f} per hour"
                )

    def _spend(self, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0) -> None:
        usd = cost_usd(self.model, input_tokens, output_tokens, self.prices, cached_input_tokens)
        if usd is None:
            return
        self.stats.spent_usd += usd
        if self.shared_spend is not None:
            self.shared_spend.add(usd)
        if self.budget_usd_per_hour is not None:
            self._spent_lately.append((time.monotonic(), usd))

    @staticmethod
    def _handed_on(reply: JudgeReply[Any]) -> JudgeReply[Any]:
        return dataclasses.replace(
            reply,
            input_tokens=0,
            output_tokens=0,
            cached_input_tokens=0,
            cost_usd=0.0,
            latency_ms=0.0,
            shared=True,
            calls=0,
            abandoned=0,
            estimated_input_tokens=0,
        )

    def _charge(self, usage: JudgeUsage) -> None:
        """Count calls given up at their timeout against the budget: their prompts were sent
        (an estimate; the server may have gone on generating, uncounted)."""
        self._spend(usage.estimated_input_tokens, 0)

    async def _ask(self, request: JudgeRequest[T], key: str) -> JudgeReply[T]:
        started = time.perf_counter()
        if self.cache is not None:
            hit = await self.cache.aget(key)
            if hit is not None:
                parsed = request.schema.model_validate(hit["parsed"])
                if request.check is None or request.check(parsed) is None:
                    self.stats.cache_hits += 1
                    return JudgeReply(
                        parsed=parsed,
                        raw=hit["raw"],
                        model=self.model,
                        cost_usd=0.0,
                        latency_ms=(time.perf_counter() - started) * 1000,
                        cached=True,
                        calls=0,
                    )
        await self._check_budget()
        messages = list(request.messages)
        usage = JudgeUsage()  # every call's cost, whatever comes of the answer
        problem: ReplyError | None = None
        broken_rule: str | None = None
        text = ""
        attempt = rule_reasks = 0
        while True:
            try:
                completion = await self._complete(messages, request.schema)
            except JudgeError as exc:  # the calls made before it still count, on the error
                self._charge(exc.usage)
                usage.add(exc.usage)
                exc.usage = usage
                raise
            self.stats.completions += 1
            self.stats.estimated_usage += completion.usage_estimated
            usage.calls += completion.calls
            usage.input_tokens += completion.input_tokens
            usage.output_tokens += completion.output_tokens
            usage.cached_input_tokens += completion.cached_input_tokens
            self._spend(
                completion.input_tokens, completion.output_tokens, completion.cached_input_tokens
            )
            text = completion.text
            try:
                parsed = parse_reply(text, request.schema)
            except ReplyError as exc:
                problem = exc
                if completion.refusal and not text.strip():  # the same prompt is declined again
                    problem = ReplyError(
                        f"the judge model declined to answer: {completion.refusal[:300]}"
                    )
                    break
                if completion.filtered:  # the same prompt is filtered again
                    problem = ReplyError(
                        f"the provider's content filter {completion.filtered}; asking again "
                        "gives the same: judge these traces with another model or provider"
                    )
                    break
                if completion.cut_at_limit:  # asked again, it would stop at the same limit
                    problem = ReplyError(
                        f"the reply stopped at the token limit before it was complete ({exc}); "
                        "a reasoning model spends the limit thinking before it answers: raise "
                        "max_tokens (--judge-max-tokens)"
                    )
                    break
                if attempt >= self.max_parse_retries:
                    break
                attempt += 1
                self.stats.reasks += 1
                messages += _reask(text, f"That reply could not be used: {exc}.")
                continue
            broken_rule = request.check(parsed) if request.check is not None else None
            if broken_rule is not None:
                if rule_reasks >= 1:
                    break
                rule_reasks += 1
                self.stats.reasks += 1
                messages += _reask(text, f"That answer breaks a rule: {broken_rule}.")
                continue
            reply = JudgeReply(
                parsed=parsed,
                raw=text,
                model=self.model,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cached_input_tokens=usage.cached_input_tokens,
                cost_usd=cost_usd(
                    self.model,
                    usage.input_tokens,
                    usage.output_tokens,
                    self.prices,
                    usage.cached_input_tokens,
                ),
                latency_ms=(time.perf_counter() - started) * 1000,
                attempts=attempt + rule_reasks + 1,
                calls=usage.calls,
            )
            if self.cache is not None:
                await self.cache.aput(key, {"parsed": parsed.model_dump(mode="json"), "raw": text})
            return reply
        self.stats.unparsable += 1
        error: JudgeParseError
        if broken_rule is not None:  # never cached: the next replay asks again
            error = JudgeInvalidAnswerError(
                redact_text(f"{broken_rule}, also after a re-ask that stated the rule"),
                raw_reply=redact_text(text),
            )
        else:
            error = JudgeParseError(  # a reply may echo the prompt's secrets
                redact_text(f"unparsable after {attempt + 1} replies: {problem}"),
                raw_reply=redact_text(text),
            )
        error.usage = usage
        raise error


def _reask(reply: str, why: str) -> list[dict[str, str]]:
    """The messages that show the judge its reply and ask again."""
    return [
        {"role": "assistant", "content": reply},
        {
            "role": "user",
            "content": f"{why} Answer again with only one JSON object that matches the "
            "requested schema.",
        },
    ]
