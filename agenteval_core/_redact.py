"""Redacting secrets and truncating oversized values before a trace is written or sent."""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import PydanticSerializationError

from .schema._trace import Trace
from .schema._values import plain, safe_int, safe_text, truncated

__all__ = ["DEFAULT_SECRET_FIELDS", "DEFAULT_SECRET_PATTERNS", "Redactor", "configure_redaction"]

# a key's left edge: not inside a longer identifier ("ask-human-...", "task-42-...")
_EDGE = r"(?<![A-Za-z0-9_\-])"

DEFAULT_SECRET_PATTERNS: dict[str, str] = {
    "anthropic-key": _EDGE + r"sk-ant-[A-Za-z0-9_\-]{20,}",
    # a key holds a digit: hyphenated words ("sk-human-for-approval-...") do not
    "openai-key": _EDGE + r"sk-(?:proj-|svcacct-|admin-)?(?=[A-Za-z0-9_\-]{0,200}\d)"
    r"[A-Za-z0-9_\-]{20,}",
    "aws-access-key": r"\b(?:AKIA|ASIA)[A-Z2-7]{16}\b",
    "aws-secret-key": r"(?i)\baws_secret_access_key[\"'\s:=]+[A-Za-z0-9/+=]{40}",
    "aws-secret-key-bare": r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
    "bearer-token": r"(?i)\bBearer\s+[A-Za-z0-9._~+/\-]{16,}=*",
    "basic-auth": r"(?i)\bBasic\s+[A-Za-z0-9+/]{12,}={0,2}",
    "github-token": r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",
    "github-fine-grained-token": r"\bgithub_pat_[A-Za-z0-9_]{22,}",
    "jwt": r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
    "private-key": r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?"
    r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
    "slack-token": r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    "google-api-key": r"\bAIza[0-9A-Za-z_\-]{35}",
    "stripe-key": r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}",
    "url-password": r"(?<=://)[^\s:/@\[\]]*:[^\s/@]+(?=@)",
    # a secret-named key given a value in text: a query string or form body
    # (?api_key=...&), an environment listing (DB_PASSWORD=...), a flag, YAML, a Python
    # dict's repr ({'password': '...'}). The match starts at the end of the key's name;
    # which names count, and when, is _assigns_secret's
    "secret-assignment": r"(?i)((?:password|passwd|secret|api[_\-]?key|apikey|token|"
    r"private[_\-]?key)[\"']?\s*[=:]\s*[\"']?)([^\s&;,\"'<>(){}\[\]]+)",
    # an HTTP request written out (a fetch tool's log, a curl -H): the header's credential,
    # a scheme and its value or one long token, holding a digit or a symbol as tokens do
    # ("Authorization: pending approval" is prose)
    "authorization-header": r"(?i)\b((?:proxy-)?authorization\s*:\s*)(?!\[REDACTED)"
    r"((?:[A-Za-z][\w\-]*\s+)?(?=[^\s\"']*[0-9_\-+/=.~])[^\s\"']{8,})",
    "cookie-header": r"(?i)\b((?:set-)?cookie\s*:\s*)([^\s=;,\"'\[]+=[^\r\n\"']*)",
    # a password given to a command on its command line, as a shell tool runs it
    "command-password": r"(?i)(\b(?:curl|wget)\b[^\r\n]*?\s(?:-u|--user|--proxy-user)(?:\s+|=)?"
    r"[\"']?[^\s:\"']+:)(?!\[REDACTED)([^\s\"']+)"
    r"|(\bmysql(?:dump|admin|import|show|check)?\b[^\r\n]*?\s(?-i:-p))([^\s\"'\-][^\s\"']*)"
    r"|(\b(?:sshpass|(?:docker|podman|nerdctl|helm(?:\s+registry)?|oras)\s+login)\b[^\r\n]*?"
    r"\s(?:(?-i:-p)|--password)(?:\s+|=)[\"']?)(?!\[REDACTED)([^\s\"']+)",
    # a payment card's number (13 to 19 digits, grouped as printed or not, with a card
    # network's prefix and length and a valid check digit: see _card_number); not inside a
    # longer number, a decimal or an identifier
    "card-number": r"(?<![\w+\-.])\d(?:[ \-]?\d){12,18}(?![\w\-]|\.\d)",
}
"""Shapes of common credentials; each match becomes ``[REDACTED:<name>]`` (in a URL, the
user name is kept: ``postgres://app:[REDACTED:url-password]@db``; of a key given a value,
a header or a command, what names the secret: ``password=[REDACTED:secret-assignment]``,
``Cookie: [REDACTED:cookie-header]``, ``curl -u bob:[REDACTED:command-password]``)."""

_HINTS: dict[str, tuple[str, ...]] = {
    "anthropic-key": ("sk-",),
    "openai-key": ("sk-",),
    "aws-access-key": ("akia", "asia"),
    "aws-secret-key": ("aws_secret_access_key",),
    "bearer-token": ("bearer",),
    "basic-auth": ("basic",),
    "github-token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "github-fine-grained-token": ("github_pat_",),
    "jwt": ("eyj",),
    "private-key": ("private key-----",),
    "slack-token": ("xox",),
    "google-api-key": ("aiza",),
    "stripe-key": ("_live_", "_test_"),
    "url-password": ("://",),
    "secret-assignment": (
        *("password", "passwd", "secret", "api_key", "api-key", "apikey", "token"),
        *("private_key", "private-key", "privatekey"),
    ),
    "authorization-header": ("authorization",),
    "cookie-header": ("cookie",),
    "command-password": ("curl", "wget", "mysql", "sshpass", "login"),
}
"""Lower-cased text that each default pattern's match must contain: a cheap test that lets
most strings skip the regular expressions. Patterns of the user's, and the bare AWS secret
key (no prefix), are always run on strings long enough to hold them."""

_ASSIGNED = re.compile(
    r"(?:password|passwd|secret|api[_\-]?key|apikey|token|private[_\-]?key)[\"']?\s*[=:]"
)
"""In lower-cased text, a secret-named key given a value: ``secret-assignment`` runs only
where this finds one (its own search, case-blind, costs several times as much, and the
names occur in prose far more often than in assignments)."""

_GATES: dict[str, Callable[[str], bool]] = {
    "secret-assignment": lambda text: _ASSIGNED.search(text.lower()) is not None,
}
"""Tests of a whole text that a default pattern runs only after."""

_HINT_SEARCH = re.compile("|".join(sorted({re.escape(h) for hs in _HINTS.values() for h in hs})))
"""All hints in one pass. Its matches do not overlap, which loses nothing: no hint starts
inside another at a place the patterns could use."""


_DIGIT = re.compile(r"\d")


def _entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    counts = Counter(text)
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in counts.values())


_CARD_NETWORKS = re.compile(
    r"4\d{12}(?:\d{3}){0,2}"  # Visa: 13, 16 or 19 digits
    r"|(?:5[1-5]\d\d|222[1-9]|22[3-9]\d|2[3-6]\d\d|27[01]\d|2720)\d{12}"  # Mastercard
    r"|3[47]\d{13}"  # American Express
    r"|(?:35(?:2[89]|[3-8]\d)|6011|64[4-9]\d|65\d\d|62\d\d|3[89]\d\d|30[0-5]\d)\d{12,15}"
    r"|36\d{12,17}"  # Diners Club
)
"""Card numbers by network (prefix and length): Visa, Mastercard, American Express,
Discover, JCB, UnionPay, Diners Club. A 15-digit IMEI (35...) or a 13-digit timestamp
(17...) is none of them."""

_CARD_GROUPS = frozenset({(4, 4, 4, 4), (4, 4, 4, 4, 3), (4, 6, 5), (4, 6, 4), (4, 4, 4, 1)})
"""How card numbers are printed in groups: 4-4-4-4 (and 19 digits), 4-6-5 (American
Express), 4-6-4 (Diners Club), 4-4-4-1 (13-digit Visa)."""


_CARD_SIZED, _CARD_OVERSIZED = 10**12, 10**19
"""The integers of a card number's length, 13 to 19 digits."""


def _card_number(found: str) -> bool:
    """Whether a run of digits is a card number: a network's prefix and length, printed
    whole or in its groups with one kind of separator, and a valid Luhn check digit."""
    digits = found.replace(" ", "").replace("-", "")
    if len(digits) != len(found):
        separators = {c for c in found if not c.isdigit()}
        groups = tuple(map(len, re.split("[ -]", found)))
        if len(separators) > 1 or groups not in _CARD_GROUPS:
            return False  # a phone number, a date, an order number of another shape
    if _CARD_NETWORKS.fullmatch(digits) is None:
        return False
    total = 0
    for index, digit in enumerate(reversed(digits)):
        value = int(digit) * (2 if index % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


_CHECKS: dict[str, Callable[[str], bool]] = {
    # a random id has ~3.7 bits per character; "ASIAPACIFICSUMMITXX2" has 3.28. Ids under
    # 3.3 (about 1 in 70 random ones) are missed; the id alone is not the secret
    "aws-access-key": lambda found: _entropy(found) >= 3.3,
    # 40 base64 characters with upper, lower and digits, and random-looking (a secret key
    # has ~4.9 bits per character; words and hex hashes far less)
    "aws-secret-key-bare": lambda found: (
        found.lower() != found  # upper case, lower case and a digit, tested in C
        and found.upper() != found
        and _DIGIT.search(found) is not None
        and _entropy(found) >= 4.3
    ),
    "card-number": _card_number,
}
"""Further tests a default pattern's match must pass to count as a secret."""

_SHORTEST_SECRET = 20
"""No default pattern but ``secret-assignment`` matches fewer characters (an AWS access key
is 20): shorter strings, most of a trace's, skip them."""

_SHORTEST_ASSIGNMENT = 8
"""The fewest characters ``secret-assignment`` matches (``passwd=x``): shorter strings skip
every default pattern."""

_SHORTEST: dict[str, int] = {
    "secret-assignment": _SHORTEST_ASSIGNMENT,
    "command-password": 9,  # mysql -px
    "card-number": 13,
}
"""The default patterns that match fewer than :data:`_SHORTEST_SECRET` characters."""

_CUT_MARGIN = 512
"""Characters kept past ``max_chars`` while searching, so no secret is split by the cut."""

DEFAULT_SECRET_FIELDS: frozenset[str] = frozenset(
    {
        "api_key",
        "apikey",
        "authorization",
        "proxy_authorization",
        "password",
        "passwd",
        "pwd",
        "client_secret",
        "secret_key",
        "private_key",
        "access_token",
        "refresh_token",
        "id_token",
        "auth_token",
        "session_token",
        "x_api_key",
        "x_auth_token",
        "cookie",
        "set_cookie",
    }
)
"""Keys whose values are secrets whatever they look like (compared case-insensitively, with
``-`` read as ``_``; also any key ending in ``password``, ``passwd``, ``_secret``,
``_api_key``, ``_private_key`` or ``_access_token``, like ``db_password``, ``PGPASSWORD``
or ``userPassword``)."""

SECRET_SUFFIXES = ("password", "passwd", "_secret", "_api_key", "_private_key", "_access_token")

LOOKS_CHECKED_FIELDS: frozenset[str] = frozenset({"token", "secret", "key"})
"""Keys whose values are redacted only when they look like a secret (8 or more characters
without spaces, with letters and digits or symbols): ``{"token": "the"}`` in logprobs or a
tokenizer's output keeps its word; ``{"token": "a8Fj2kLq9x"}`` is redacted. Keys ending in
``_token`` are checked the same way."""

_LOOKS_SECRET = re.compile(r"^(?=.*[A-Za-z])(?=.*[0-9_\-+/=.~])\S{8,}$")


def _encoded_forms(value: str) -> list[str]:
    """The text a string may hide a secret in: URL-decoded, with JSON ``\\uXXXX`` escapes
    undone."""
    forms = []
    if "%" in value and _PERCENT.search(value):
        forms.append(urllib.parse.unquote(value))
    if "\\u" in value or "\\/" in value:
        forms.append(_JSON_ESCAPE.sub(lambda m: chr(int(m[1], 16)), value).replace("\\/", "/"))
    return forms


_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_JSON_ESCAPE = re.compile(r"\\u([0-9A-Fa-f]{4})")
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/_\-])[A-Za-z0-9+/_\-]{28,}={0,2}")
_ENCODED_DATA = re.compile(r"(data:[^,;\s]*(?:;[^,;\s]+)*;base64,)?[A-Za-z0-9+/_\-]+={0,2}")
"""A string that is only encoded binary data: base64 (standard or URL-safe), optionally as a
data URL (an image or audio clip in a model's messages). Cut, it decodes to nothing: an
oversized one is replaced whole (its data URL header kept), not cut."""


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


@dataclass(frozen=True)
class _Rule:
    name: str
    pattern: re.Pattern[str]
    hints: tuple[str, ...]
    check: Callable[[str], bool] | None
    default: bool = True
    gate: Callable[[str], bool] | None = None
    shortest: int = _SHORTEST_SECRET
    """A default pattern's fewest characters: a shorter text is not searched."""

    def replace(self, found: re.Match[str]) -> str:
        if self.check is not None and not self.check(found[0]):
            return found[0]
        if self.name == "url-password":  # keep the user name: only the password is secret
            return f"{found[0].split(':', 1)[0]}:[REDACTED:url-password]"
        if self.name == "secret-assignment":  # keep the key: only its value is secret
            return f"{found[1]}[REDACTED:secret-assignment]" if _assigns_secret(found) else found[0]
        if self.name in _NAMED_BEFORE:  # keep what names the secret: the header, the command
            named = next(group for group in found.groups()[::2] if group is not None)
            return f"{named}[REDACTED:{self.name}]"
        return f"[REDACTED:{self.name}]"


_NAMED_BEFORE = frozenset({"authorization-header", "cookie-header", "command-password"})
"""Patterns whose odd groups (the first of each alternative's pair) name the secret, which
the even group after it holds: only the secret is replaced."""


def _assigns_secret(found: re.Match[str]) -> bool:
    """Whether a key given a value in text (``found``: the end of the key's name with its
    separator, then the value; the name's start lies before the match) gives a secret: a
    secret name's (``password``, ``DB_PASSWORD``, ``api-key``) after ``=`` or in quotes
    (``'password': '...'``), and after a bare ``:`` (prose says "Reset your password: click
    the link") or for an ambiguous name (``token``, ``csrf_token``) only a value that looks
    like one."""
    text, assigned, end = found.string, found[1], found.start()
    start = end
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_-"):
        start -= 1  # the rest of the name: DB_PASSWORD, --api-key, csrf_token
    named = assigned.rstrip(" \t\"'=:")
    kind = _field_kind(text[start:end].lstrip("-") + named, DEFAULT_SECRET_FIELDS)
    looks = _LOOKS_SECRET.match(found[2]) is not None
    opening = text[start - 1 : start]  # the name's own opening quote
    quoted = opening in ("'", '"') and assigned[len(named) : len(named) + 1] == opening
    return (kind == _LOOKS and looks) or (kind == _ALWAYS and (looks or quoted or "=" in assigned))


_NEVER, _ALWAYS, _LOOKS = 0, 1, 2
"""What a key's name says of its value: nothing, a secret, a secret if it looks like one."""


def _field_name(key: str) -> str:
    return key.lower().replace("-", "_")


def _field_kind(key: str, always: frozenset[str]) -> int:
    name = _field_name(key)
    if name in always or name.endswith(SECRET_SUFFIXES):
        return _ALWAYS
    if name in LOOKS_CHECKED_FIELDS or name.endswith("_token"):
        return _LOOKS
    return _NEVER


def _is_secret_field(key: str, item: Any, always: frozenset[str], kinds: dict[str, int]) -> bool:
    """Whether a key's value is redacted whole: always for a secret name (``password``,
    ``db_password``, ``Cookie``), and for an ambiguous one (``token``) when it looks like a
    secret. ``kinds`` remembers what each key name is (records repeat their keys)."""
    if item in (None, ""):
        return False
    kind = kinds.get(key)
    if kind is None:
        kind = kinds[key] = _field_kind(key, always)
    if kind == _LOOKS:
        return isinstance(item, str) and _LOOKS_SECRET.match(item) is not None
    return kind == _ALWAYS


def _piece_text(item: Any) -> str | None:
    if isinstance(item, str):
        return item
    if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
        return str(item["text"])
    return None


def _with_text(item: Any, text: str) -> Any:
    return text if isinstance(item, str) else {**item, "text": text}


_JSON_OBJECT_START = re.compile(r'\{\s*"')
_JSON_TRIES = 20
"""JSON objects looked for after prose in one string at most (each try parses from there)."""
_DECODER = json.JSONDecoder()
_JOIN_LIMIT = 1_000_000
"""Streamed pieces are joined and searched up to this many characters in all."""


@dataclass
class Redactor:
    """Replaces secrets in every string of a trace, and cuts strings over ``max_chars``.

    Args:
        patterns: extra regular expressions, name → pattern (merged over the defaults).
        fields: extra key names whose values are always redacted.
        max_chars: strings longer than this are cut, ending in a visible marker that records
            their original size (``None`` keeps them whole); one that is only base64 data
            (an image's data URL), which a cut would leave undecodable, is replaced whole by
            a marker with its size, its data URL header kept.
    """

    patterns: dict[str, str] = field(default_factory=dict)
    fields: Iterable[str] = ()
    max_chars: int | None = 100_000
    _rules: tuple[int, list[_Rule], frozenset[str], bool] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rules = self._compile()

    def _compile(self) -> tuple[int, list[_Rule], frozenset[str], bool]:
        process = _process_rules
        custom = process.patterns | dict(self.patterns)
        compiled = [
            _Rule(
                name,
                re.compile(pattern),
                _HINTS.get(name, ()),
                _CHECKS.get(name),
                True,
                _GATES.get(name),
                _SHORTEST.get(name, _SHORTEST_SECRET),
            )
            if name not in custom
            else _Rule(name, re.compile(pattern), (), None, default=False)
            for name, pattern in (DEFAULT_SECRET_PATTERNS | custom).items()
        ]
        fields = (
            DEFAULT_SECRET_FIELDS
            | {_field_name(name) for name in process.fields}
            | {_field_name(name) for name in self.fields}
        )
        custom_rules = any(not rule.default for rule in compiled)
        return process.generation, compiled, fields, custom_rules

    def _current(self) -> tuple[int, list[_Rule], frozenset[str], bool]:
        if self._rules[0] != _process_rules.generation:  # configure_redaction was called
            self._rules = self._compile()
        return self._rules

    def text(self, value: str) -> str:
        """One string with its secrets replaced and its length bounded. A string that holds
        JSON objects (a tool result, or JSON after prose) has their secret-named fields
        redacted too; a secret hidden by URL-encoding, JSON ``\\u`` escapes or base64 is
        found in the decoded text (the string is then kept decoded, with the secret
        replaced; a base64 segment is replaced whole).

        An oversized string is cut before it is searched (keeping a margin, so a secret that
        straddles the cut is still seen whole), and a default pattern runs only on text that
        holds its telltale prefix: the cost stays linear in ``max_chars`` however large the
        payload."""
        size, limit = len(value), self.max_chars
        if (
            size < _SHORTEST_SECRET
            # a short key given a value (passwd=x), a command's password (mysql -px) and a
            # card number are the secrets this short
            and (
                size < _SHORTEST_ASSIGNMENT
                or ("=" not in value and ":" not in value and "-p" not in value)
            )
            and (size < 13 or not value.replace(" ", "").replace("-", "").isdigit())
            and (limit is None or size <= limit)
            and value.isascii()
            and "{" not in value  # no JSON that could hold a secret-named field
            and "[" not in value
            and "%" not in value  # nothing URL-encoded
            and "\\" not in value  # nothing escaped
            and not self._current()[3]  # only the defaults, none of which is this short
        ):
            return value  # most strings of a structured payload: nothing below can change it
        value = safe_text(value)
        size = len(value)
        oversized = limit is not None and size > limit
        if oversized and (data := _ENCODED_DATA.fullmatch(value)) is not None:
            header = data[1] or ""
            start = value[len(header) : len(header) + 1000]
            # without a data URL's header, base64 of binary data mixes cases (a run of one
            # letter or of hex digits is cut as text is)
            if header or (start.lower() != start and start.upper() != start):
                return f"{header}…[base64 data omitted: {size - len(header)} characters]"
        value = (
            value[: limit + _CUT_MARGIN]
            if limit is not None and oversized
            else self._json_text(value)
        )
        value = self._patterns(value)
        for form in _encoded_forms(value):
            redacted = self._patterns(form)
            if redacted != form:
                value = redacted
                break
        if len(value) >= 28:
            value = _BASE64.sub(self._base64_segment, value)
        if limit is not None and oversized:
            value = truncated(value[:limit], size)
        return value

    def _patterns(self, value: str) -> str:
        """``value`` with every pattern's matches replaced."""
        present = self._hints_in(value)
        for rule in self._current()[1]:
            if rule.default and (
                len(value) < rule.shortest or (rule.hints and present.isdisjoint(rule.hints))
            ):
                continue  # too short, or no telltale prefix: the pattern cannot match
            if rule.gate is not None and not rule.gate(value):
                continue
            redacted = rule.pattern.sub(rule.replace, value)
            if redacted != value:
                value, present = redacted, self._hints_in(redacted)
        return value

    def _spans(self, value: str) -> list[tuple[int, int, str]]:
        """Where secrets lie in ``value``: (start, end, pattern name)."""
        present = self._hints_in(value)
        return [
            (found.start(), found.end(), rule.name)
            for rule in self._current()[1]
            if not (rule.default and rule.hints and present.isdisjoint(rule.hints))
            for found in rule.pattern.finditer(value)
            if rule.check is None or rule.check(found[0])
        ]

    def _base64_segment(self, found: re.Match[str]) -> str:
        segment = found[0]
        if segment.lower() == segment or segment.upper() == segment:
            return segment  # base64 of text mixes cases; identifiers and padding do not
        try:
            raw = base64.b64decode(
                segment.rstrip("=") + "=" * (-len(segment.rstrip("=")) % 4),
                altchars=b"-_" if "-" in segment or "_" in segment else None,
            )
            decoded = raw.decode("utf-8")
        except (binascii.Error, ValueError):
            return segment  # not base64 of text: most such runs are identifiers or data
        names = sorted({name for _, _, name in self._spans(decoded)})
        return f"[REDACTED:base64:{','.join(names)}]" if names else segment

    @staticmethod
    def _hints_in(value: str) -> frozenset[str]:
        """The telltale prefixes a string holds, found in one pass over it."""
        if len(value) < _SHORTEST_ASSIGNMENT:
            return frozenset()
        return frozenset(_HINT_SEARCH.findall(value.lower()))

    def _json_text(self, value: str) -> str:
        """Secret-named fields redacted in the JSON a text holds: the whole text, or objects
        that follow prose ("Response: {...}"); JSON text with nothing secret is kept as is."""
        if value.lstrip().startswith(("{", "[")):
            try:
                parsed = json.loads(value)
            except (ValueError, RecursionError):
                pass
            else:
                redacted = self.value(parsed)
                return value if redacted == parsed else json.dumps(redacted, ensure_ascii=False)
        if '"' not in value:
            return value
        pieces, position, tries = [], 0, 0
        for start in _JSON_OBJECT_START.finditer(value):
            if start.start() < position or tries >= _JSON_TRIES:
                continue
            tries += 1
            try:
                parsed, end = _DECODER.raw_decode(value, start.start())
            except (ValueError, RecursionError):
                continue
            redacted = self.value(parsed)
            if redacted != parsed:
                pieces += [
                    value[position : start.start()],
                    json.dumps(redacted, ensure_ascii=False),
                ]
                position = end
        return "".join([*pieces, value[position:]]) if pieces else value

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with secrets replaced: the values of secret-named keys,
        secret shapes in strings, and in keys too (a token can be a dictionary key)."""
        return self._value(value, {}, {})

    def _value(self, value: Any, seen: dict[str, str], kinds: dict[str, int]) -> Any:
        # ``seen`` holds the redacted form of each string met so far, so each distinct string
        # is searched once: a tool result reappears in the span output, the tool call and
        # every later LLM input, often as equal copies (not the same object), and records
        # repeat their keys and many of their values
        if isinstance(value, str):
            redacted = seen.get(value)
            if redacted is None:
                redacted = seen[value] = self.text(value)
            return redacted
        if isinstance(value, dict):
            return self._fields(value, seen, kinds)
        if isinstance(value, list | tuple):
            return [self._value(item, seen, kinds) for item in self._joined_pieces(list(value))]
        if type(value) is int:
            return self._int(value, seen)
        return value

    def _int(self, value: int, seen: dict[str, str]) -> int | str:
        """An integer, or its text redacted when the text holds a secret: a card number a
        tool's schema types as an integer (13 to 19 digits) is as secret as one in text."""
        if _CARD_SIZED <= value < _CARD_OVERSIZED:
            text = str(value)
            redacted = seen.get(text)
            if redacted is None:
                redacted = seen[text] = self.text(text)
            if redacted != text:
                return redacted
        return safe_int(value)

    def _fields(
        self, value: dict[Any, Any], seen: dict[str, str], kinds: dict[str, int]
    ) -> dict[Any, Any]:
        """:meth:`_value` of a dict. Written out for the common case (string keys, string
        and number values), with no call per field: a tool's 20,000 records took ~80 ms a
        walk through a call per key and per value, on the recorder thread that a finished
        run's line waits on."""
        fields = self._current()[2]
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if type(key) is str:
                kind = kinds.get(key)
                if kind is None:
                    kind = kinds[key] = _field_kind(key, fields)
                if kind != _NEVER and _is_secret_field(key, item, fields, kinds):
                    item = "[REDACTED]"
                elif type(item) is str:
                    redacted = seen.get(item)
                    if redacted is None:
                        redacted = seen[item] = self.text(item)
                    item = redacted
                elif type(item) is int:
                    item = self._int(item, seen)
                elif not (item is None or type(item) is float or type(item) is bool):
                    item = self._value(item, seen, kinds)
                redacted_key = seen.get(key)
                if redacted_key is None:
                    redacted_key = seen[key] = self.text(key)
                out[redacted_key] = item
            else:
                out[key] = self._value(item, seen, kinds)
        return out

    def _joined_pieces(self, items: list[Any]) -> list[Any]:
        """Streamed chunks (a list of strings or text blocks) with a secret split across two
        of them replaced where the pieces join: the piece it starts in ends with the marker,
        the pieces it runs on into lose its rest."""
        found = [_piece_text(item) for item in items]
        texts = [text for text in found if text is not None]
        if len(items) < 2 or len(texts) < len(items):
            return items
        joined = "".join(texts)
        if len(joined) < _SHORTEST_SECRET or len(joined) > _JOIN_LIMIT:
            return items
        bounds, position = [], 0
        for text in texts:
            bounds.append((position, position + len(text)))
            position += len(text)
        pieces = list(texts)
        for start, end, name in self._spans(joined):
            touched = [i for i, (low, high) in enumerate(bounds) if low < end and start < high]
            if len(touched) < 2:
                continue  # inside one piece: that piece's own redaction replaces it
            first, last = touched[0], touched[-1]
            pieces[first] = joined[bounds[first][0] : start] + f"[REDACTED:{name}]"
            for middle in touched[1:-1]:
                pieces[middle] = ""
            pieces[last] = joined[end : bounds[last][1]]
        if pieces == texts:
            return items
        return [_with_text(item, piece) for item, piece in zip(items, pieces, strict=True)]

    def trace(self, trace: Trace) -> Trace:
        """A redacted copy of a trace: every field, span, tool call and attribute, except the
        tools' JSON schemas (a parameter named ``password`` is not a secret)."""
        try:
            data = trace.to_jsonable()  # each tool call once: redacted once, shared again
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
