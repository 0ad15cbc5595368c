"""LLM judges: the protocol, an OpenAI-compatible HTTP judge and a LangChain chat-model judge."""

# The imports below are for type checkers only; _EXPORTS is what loads each name at run time.
# ruff: noqa: F401

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import load_export

if TYPE_CHECKING:
    from ._base import DEFAULT_CACHE, BaseJudge, Completion, JudgeStats, SharedSpend
    from ._cache import JudgeCache, default_cache_path
    from ._langchain import LangChainJudge
    from ._openai import OUTPUT_MODES, OpenAIJudge, OutputMode, default_max_tokens
    from ._parse import ReplyError, parse_reply
    from ._pricing import DEFAULT_PRICES, Price
    from ._protocol import Judge, JudgeReply, JudgeRequest
    from ._traffic import Traffic

# Names load on first use: the metrics import the judge protocol alone, and the HTTP client
# (httpx, with whatever command-line libraries it finds) loads only for a judge that calls out.
_EXPORTS = {
    "DEFAULT_CACHE": "._base",
    "BaseJudge": "._base",
    "Completion": "._base",
    "JudgeStats": "._base",
    "SharedSpend": "._base",
    "JudgeCache": "._cache",
    "default_cache_path": "._cache",
    "LangChainJudge": "._langchain",
    "OpenAIJudge": "._openai",
    "OutputMode": "._openai",
    "OUTPUT_MODES": "._openai",
    "default_max_tokens": "._openai",
    "ReplyError": "._parse",
    "parse_reply": "._parse",
    "DEFAULT_PRICES": "._pricing",
    "Price": "._pricing",
    "Judge": "._protocol",
    "JudgeReply": "._protocol",
    "JudgeRequest": "._protocol",
    "Traffic": "._traffic",
}


def __getattr__(name: str) -> Any:
    return load_export(__name__, _EXPORTS, name, globals())


def __dir__() -> list[str]:
    return __all__


__all__ = [*sorted(_EXPORTS), "judge_from_options"]


def judge_from_options(
    *,
    model: str,
    base_url: str | None = None,
    api_key: str | None = None,
    use_cache: bool = True,
    cache_path: str | Path | None = None,
    concurrency: int = 8,
    requests_per_second: float = 10.0,
    budget_usd: float | None = None,
    output_mode: OutputMode | None = None,
    timeout: float | None = None,
    max_tokens: int | None = None,
    max_input_tokens: int | None = None,
    result_deadline: float | None = None,
) -> OpenAIJudge:
    """The judge the CLI's ``--judge-*`` options describe: at most ``concurrency`` requests
    in flight, ``requests_per_second`` started per second, no new call once the estimated
    spend reaches ``budget_usd``, the output mode, the seconds per call and the most tokens
    a reply may take."""
    from ._cache import JudgeCache
    from ._openai import OUTPUT_MODES, OpenAIJudge, OutputMode, default_max_tokens

    cache = JudgeCache(cache_path) if use_cache else None
    # spread over the second, not started together at its start: a tenth of a second's
    # worth (at least one) each period that makes the rate exact, so 10 a second is one
    # every 0.1 s and 1.5 a second one every 2/3 s. Ten at once each second let 20 reach
    # the server within one second, where a provider counting per second answers 429
    per_period = max(1, math.ceil(requests_per_second / 10))
    period = per_period / requests_per_second
    return OpenAIJudge(
        model,
        base_url=base_url,
        api_key=api_key,
        cache=cache,
        max_concurrency=concurrency,
        requests_per_period=per_period,
        period=period,
        budget_usd=budget_usd,
        output_mode=output_mode,
        timeout=timeout,
        max_tokens=max_tokens,
        max_input_tokens=max_input_tokens,
        result_deadline=result_deadline,
    )
