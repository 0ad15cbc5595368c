"""What a judge is: something that answers a chat prompt with a reply parsed into a schema.

Judge metrics build ``JudgeRequest``s and read ``JudgeReply``s; transports (an OpenAI-compatible
HTTP client, a LangChain chat model) only move text. Prompt building, parsing, re-asking and
composition live once, outside the transports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

__all__ = ["Judge", "JudgeReply", "JudgeRequest"]

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class JudgeRequest(Generic[T]):
    """One question to a judge.

    ``metric`` and ``prompt_version`` are part of the cache key, so changing a prompt's text
    must change its version.
    """

    metric: str
    prompt_version: str
    messages: list[dict[str, str]]
    """Chat messages, e.g. ``[{"role": "system", "content": ...}, {"role": "user", ...}]``."""
    schema: type[T]
    """The reply must parse into this model."""
    stage: str = "score"
    """Name of the metric's stage (extract, verdicts, score, ...), for metadata and logs."""
    shared: bool = False
    """The same question for several metrics of one trace (task or plan extraction): a judge
    asks it once and hands the one answer to every metric that asks."""
    check: Callable[[Any], str | None] | None = None
    """The metric's rule for a parsed answer (e.g. one verdict per tool call): the problem
    with it, or None. An answer that breaks it is asked again once, with the rule stated,
    and is never cached."""


@dataclass
class JudgeReply(Generic[T]):
    """A parsed judge reply with its accounting."""

    parsed: T
    raw: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those the provider read from its prompt cache (billed lower)."""
    cost_usd: float | None = None
    latency_ms: float = 0.0
    cached: bool = False
    attempts: int = 1
    shared: bool = False
    """The answer to a shared stage that another metric's request already paid for: its
    tokens and cost are counted there, and are zero here."""
    extra: dict[str, Any] = field(default_factory=dict)
    calls: int = 1
    """Requests the transport made for this answer (re-asks and retries included; 0 when it
    came from the cache or another metric's shared answer)."""
    abandoned: int = 0
    """Of those, requests given up at their timeout."""
    estimated_input_tokens: int = 0
    """The abandoned requests' prompt tokens, estimated."""


@runtime_checkable
class Judge(Protocol):
    """Answers judge requests. Raises ``JudgeUnavailableError`` or ``JudgeParseError``."""

    @property
    def model(self) -> str:
        """The judge model's name, recorded on every result."""
        ...

    async def judge(self, request: JudgeRequest[T]) -> JudgeReply[T]:
        """Ask the judge and parse the reply into ``request.schema``."""
        ...
