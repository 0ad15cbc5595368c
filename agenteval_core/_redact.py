"""Redacting secrets and truncating oversized values before a trace is written or sent."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import PydanticSerializationError

from .schema._trace import Trace
from .schema._values import plain, safe_int, safe_text

__all__ = ["DEFAULT_SECRET_FIELDS", "DEFAULT_SECRET_PATTERNS", "Redactor", "configure_redaction"]

DEFAULT_SECRET_PATTERNS: dict[str, str] = {
    "anthropic-key": r"sk-ant-[A-Za-z0-9_\-]{20,}",
    "openai-key": r"sk-(?:proj-|svcacct-)?[A-Za-z0-9_\-]{20,}",
    "aws-access-key": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    "aws-secret-key": r"(?i)\baws_secret_access_key[\"'\s:=]+[A-Za-z0-9/+=]{40}",
    "bearer-token": r"(?i)\bBearer\s+[A-Za-z0-9._~+/\-]{16,}=*",
    "github-token": r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",
    "github-fine-grained-token": r"\bgithub_pat_[A-Za-z0-9_]{22,}",
}
"""Shapes of common credentials; each match becomes ``[REDACTED:<name>]``."""

_HINTS: dict[str, tuple[str, ...]] = {
    "anthropic-key": ("sk-",),
    "openai-key": ("sk-",),
    "aws-access-key": ("akia", "asia"),
    "aws-secret-key": ("aws_secret_access_key",),
    "bearer-token": ("bearer",),
    "github-token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "github-fine-grained-token": ("github_pat_",),
}
"""Lower-cased text that each default pattern's match must contain: a cheap test that lets
most strings skip the regular expressions. Patterns of the user's are always run."""

_HINT_SEARCH = re.compile("|".join(sorted({re.escape(h) for hs in _HINTS.values() for h in hs})))
"""All hints in one pass. Its matches do not overlap, which loses nothing: no two hints start
at the same position, and a hint can only begin inside another where it follows a letter
('asiakia'), where the patterns that start with it need a word boundary."""

_SHORTEST_SECRET = 20
"""No default pattern matches fewer characters (an AWS access key is 20): shorter strings,
most of a trace's, skip them all."""

_SHARED_TEXT = 1_000
"""Strings at least this long are redacted once per trace however often they appear."""

_CUT_MARGIN = 512
"""Characters kept past ``max_chars`` while searching, so no secret is split by the cut."""

DEFAULT_SECRET_FIELDS: frozenset[str] = frozenset(
    {
        "api_key",
        "apikey",
        "api-key",
        "authorization",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "access_token",
        "refresh_token",
        "token",
        "x-api-key",
    }
)
"""Keys whose values are secrets whatever they look like (compared case-insensitively)."""


@dataclass(frozen=True)
class _ProcessRules:
    patterns: dict[str, str]
    fields: frozenset[str]
    generation: int


_process_rules = _ProcessRules({}, frozenset(), 0)


def configure_redaction(
    *, patterns: Mapping[str, str] | None = None, fields: Iterable[str] = ()
) -> None:
    """Set secret patterns and secret-named fields that every redaction in this process
    applies, on top of the defaults and of each ``Redactor``'s own: the capture, results,
    judge prompts and error texts, OpenTelemetry exports and reports. Call it once at
    start-up; a later call replaces the earlier one, and a call with nothing clears it.

    Args:
        patterns: name → regular expression; each match becomes ``[REDACTED:<name>]``.
        fields: key names whose values are always redacted (compared case-insensitively).

    Raises:
        ValueError: a pattern is not a valid regular expression (named in the message).
    """
    global _process_rules
    patterns = dict(patterns or {})
    for name, pattern in patterns.items():
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"redaction pattern {name!r} is not a valid regex: {exc}") from None
    _process_rules = _ProcessRules(
        patterns,
        frozenset(name.lower() for name in fields),
        _process_rules.generation + 1,
    )


@dataclass
class Redactor:
    """Replaces secrets in every string of a trace, and cuts strings over ``max_chars``.

    Args:
        patterns: extra regular expressions, name → pattern (merged over the defaults).
        fields: extra key names whose values are always redacted.
        max_chars: strings longer than this are cut, ending in a visible marker that records
            their original size (``None`` keeps them whole).
    """

    patterns: dict[str, str] = field(default_factory=dict)
    fields: Iterable[str] = ()
    max_chars: int | None = 100_000
    _rules: tuple[int, list[tuple[str, re.Pattern[str], tuple[str, ...]]], frozenset[str]] = field(
        init=False, repr=False
    )

    def __post_init__(self) -> None:
        self._rules = self._compile()

    def _compile(
        self,
    ) -> tuple[int, list[tuple[str, re.Pattern[str], tuple[str, ...]]], frozenset[str]]:
        process = _process_rules
        custom = process.patterns | dict(self.patterns)
        compiled = [
            (name, re.compile(pattern), () if name in custom else _HINTS.get(name, ()))
            for name, pattern in (DEFAULT_SECRET_PATTERNS | custom).items()
        ]
        fields = DEFAULT_SECRET_FIELDS | process.fields | {name.lower() for name in self.fields}
        return process.generation, compiled, fields

    def _current(
        self,
    ) -> tuple[int, list[tuple[str, re.Pattern[str], tuple[str, ...]]], frozenset[str]]:
        if self._rules[0] != _process_rules.generation:  # configure_redaction was called
            self._rules = self._compile()
        return self._rules

    def text(self, value: str) -> str:
        """One string with its secrets replaced and its length bounded. A string that holds
        a JSON object or array (a tool result, say) has its secret-named fields redacted too.

        An oversized string is cut before it is searched (keeping a margin, so a secret that
        straddles the cut is still seen whole), and a pattern runs only on text that holds
        its telltale prefix: the cost stays linear in ``max_chars`` however large the
        payload."""
        value = safe_text(value)
        size, limit = len(value), self.max_chars
        oversized = limit is not None and size > limit
        value = (
            value[: limit + _CUT_MARGIN]
            if limit is not None and oversized
            else self._json_text(value)
        )
        present = self._hints_in(value)
        for name, pattern, hints in self._current()[1]:
            if hints and present.isdisjoint(hints):
                continue  # no telltale prefix: the pattern cannot match
            redacted = pattern.sub(f"[REDACTED:{name}]", value)
            if redacted != value:
                value, present = redacted, self._hints_in(redacted)
        if limit is not None and oversized:
            value = f"{value[:limit]}…[truncated: {size} characters in all]"
        return value

    @staticmethod
    def _hints_in(value: str) -> frozenset[str]:
        """The telltale prefixes a string holds, found in one pass over it."""
        if len(value) < _SHORTEST_SECRET:
            return frozenset()
        return frozenset(_HINT_SEARCH.findall(value.lower()))

    def _json_text(self, value: str) -> str:
        if not value.lstrip().startswith(("{", "[")):
            return value
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        redacted = self.value(parsed)
        return value if redacted == parsed else json.dumps(redacted, ensure_ascii=False)

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with secrets replaced: the values of secret-named keys,
        secret shapes in strings, and in keys too (a token can be a dictionary key)."""
        return self._value(value, {})

    def _value(self, value: Any, seen: dict[int, str]) -> Any:
        # ``seen`` holds the redacted form of each large string by identity: a tool result
        # reappears in the span output and in every later LLM input, and is searched once
        if isinstance(value, str):
            if len(value) < _SHARED_TEXT:
                return self.text(value)
            redacted = seen.get(id(value))
            if redacted is None:
                redacted = seen[id(value)] = self.text(value)
            return redacted
        if isinstance(value, dict):
            fields = self._current()[2]
            return {
                (self.text(key) if isinstance(key, str) else key): "[REDACTED]"
                if isinstance(key, str) and key.lower() in fields and value[key] not in (None, "")
                else self._value(item, seen)
                for key, item in value.items()
            }
        if isinstance(value, list | tuple):
            return [self._value(item, seen) for item in value]
        if type(value) is int:
            return safe_int(value)
        return value

    def trace(self, trace: Trace) -> Trace:
        """A redacted copy of a trace: every field, span, tool call and attribute, except the
        tools' JSON schemas (a parameter named ``password`` is not a secret)."""
        try:
            data = trace.model_dump(mode="json")
        except (PydanticSerializationError, ValueError, RecursionError):
            data = plain(trace)  # a cycle or a value of no JSON type, in a trace built by hand
        tools = data.pop("tools")
        redacted = self.value(data)
        redacted["tools"] = tools
        return Trace.model_validate(redacted)


_TEXT_REDACTOR = Redactor(max_chars=None)


def redact_text(text: str) -> str:
    """A text with the secrets of the defaults and of ``configure_redaction`` replaced,
    whole (for judge prompts and error messages, whose length is bounded where they are
    built)."""
    return _TEXT_REDACTOR.text(text)
