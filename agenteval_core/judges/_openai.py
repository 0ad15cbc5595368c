"""A judge on any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, LM Studio,
LiteLLM, ...)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import weakref
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import httpx
from pydantic import BaseModel

from .._errors import (
    JudgeConfigError,
    JudgeContextOverflowError,
    JudgeError,
    JudgeUnavailableError,
    JudgeUnsupportedRequestError,
)
from .._redact import redact_text
from ._base import DEFAULT_CACHE, BaseJudge, Completion, json_schema
from ._cache import JudgeCache
from ._parse import reply_text
from ._pricing import Price
from ._traffic import Traffic

logger = logging.getLogger("agenteval")

__all__ = ["OUTPUT_MODES", "OpenAIJudge", "OutputMode"]

Mode = Literal["json_schema", "json_object", "text"]
OutputMode = Literal["auto", "json_schema", "json_object", "text"]
"""How a judge asks for structured output: ``json_schema`` (``response_format`` with the
reply's JSON schema), ``json_object`` (JSON mode), ``text`` (no ``response_format``; the
prompt asks for JSON), or ``auto``: the first of those the server accepts, found out by the
preflight check."""
OUTPUT_MODES: tuple[OutputMode, ...] = ("auto", "json_schema", "json_object", "text")
_FALLBACK: dict[Mode, Mode] = {"json_schema": "json_object", "json_object": "text"}
_ACCEPTED: dict[tuple[str, str], Mode] = {}
"""The output mode each endpoint and model accepted, found once per process."""


@dataclass(frozen=True)
class _RequestShape:
    """The parameters a model takes. OpenAI's reasoning models (the o-series, gpt-5) refuse
    ``max_tokens`` ("Use 'max_completion_tokens' instead") and any ``temperature`` but
    their default, each with an HTTP 400 naming the parameter."""

    token_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    temperature: bool = True


_SHAPES: dict[tuple[str, str], _RequestShape] = {}
"""The request shape each endpoint and model was found to take, once per process."""

DEFAULT_TIMEOUT = 20.0
"""Seconds one judge call may take by default: a verdict of a few hundred tokens."""

REASONING_TIMEOUT = 180.0
"""Seconds one call to a reasoning model may take by default: it reasons for up to
:data:`REASONING_ALLOWANCE` tokens before it answers, and a judge prompt about a long run
often takes it longer than :data:`DEFAULT_TIMEOUT` (timed out three times in a row, a judge
stops calling)."""

REASONING_ALLOWANCE = 8192
"""Tokens added to the default reply limit for a model that takes ``max_completion_tokens``:
its limit counts the tokens it reasons with before it answers (often a thousand or more
for a verdict), and a limit sized for the answer alone would cut every reply empty."""


def api_url(base_url: str, path: str) -> str:
    """``path`` under an API root, any query of the root kept after it (Azure's classic
    ``.../deployments/NAME?api-version=2024-10-21``): appended to the whole URL, the path
    would land inside the query and the request on the root."""
    root, _, query = base_url.partition("?")
    return root.rstrip("/") + path + (f"?{query}" if query else "")


def _refused_parameter(response: httpx.Response) -> str | None:
    """``max_tokens`` or ``temperature`` when an HTTP 400 says the model does not take it."""
    if response.status_code != 400:
        return None
    text = response.text[:4000]
    try:
        error = json.loads(text).get("error") or {}
        param, message = error.get("param"), str(error.get("message") or "")
    except (ValueError, AttributeError):
        param, message = None, text
    if "max_completion_tokens" in message and (param == "max_tokens" or "'max_tokens'" in message):
        return "max_tokens"
    if param == "temperature" or ("'temperature'" in message and "nsupported" in message):
        return "temperature"
    return None


def refusal_completion(
    response: httpx.Response, messages: list[dict[str, str]]
) -> Completion | None:
    """The completion an HTTP 400 stands for when nothing about the request was wrong:

    - a reply the server generated and then refused for failing its JSON check (Groq's
      ``json_validate_failed``, the reply in ``failed_generation``, often valid JSON in a
      Markdown fence, or cut short): it is the model's answer, read and re-asked as any
      malformed reply is, its usage estimated (characters / 4: the server reports none);
    - a prompt the provider's content filter refused (Azure OpenAI's ``content_filter``,
      a trace about harmful content): no reply, and asking again gives the same, as for a
      reply the filter withheld.
    """
    if response.status_code != 400 or (
        b"failed_generation" not in response.content and b"content_filter" not in response.content
    ):
        return None
    try:
        error = response.json()["error"]
        failed, code = error.get("failed_generation"), error.get("code")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if isinstance(failed, str):
        return Completion(
            text=failed,
            input_tokens=len(json.dumps(messages)) // 4,
            output_tokens=len(failed) // 4,
            usage_estimated=True,
        )
    if code == "content_filter":
        said = str(error.get("message") or "").split(". ")[0]
        return Completion(text="", filtered=f"refused the prompt (HTTP 400 content_filter: {said})")
    return None


_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "response_schema")
"""Words by which a refusal names the output format: OpenAI's parameter and its types, and
Gemini's own field for the schema (``generation_config.response_schema``)."""


def _refuses_format(response: httpx.Response) -> bool:
    """A refusal of the requested output format rather than an outage: a 4xx or 5xx (429
    aside: that is a rate limit) whose body names it. llama-cpp-python answers 500 with its
    validation error ("Input should be 'text' or 'json_object'"), others 400 or 422; Gemini
    a 400 naming a schema key it does not take "at 'generation_config.response_schema'"."""
    if response.status_code < 400 or response.status_code == 429:
        return False
    body = response.text[:4000].lower()
    return any(word in body for word in _FORMAT_WORDS)


CONTEXT_WORDS = re.compile(
    r"context[ _]length|maximum context|context window|too many tokens|exceeds? the context",
    re.IGNORECASE,
)
"""Words by which a server's error says the input is longer than the model takes."""

MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""The largest judge response body read by default (after decompression): a verdict takes a
few kilobytes, and a server or proxy gone wrong can send gigabytes."""

_KEY_HEADERS = frozenset({"api-key", "x-api-key"})
"""Headers that carry an API key instead of ``Authorization`` (Azure OpenAI, gateways)."""

MIN_SECRET_KEY_CHARS = 8
"""API keys shorter than this are placeholders (a local server takes any), not secrets to
scrub from error texts; every provider's real keys are far longer."""


def header_keys(headers: Mapping[str, str]) -> list[str]:
    """The API keys ``headers`` send: a bearer token, or Azure's and gateways' key headers."""
    keys = [headers.get("Authorization", "").removeprefix("Bearer ").strip()]
    return keys + [value for name, value in headers.items() if name.lower() in _KEY_HEADERS]


def scrub_keys(text: str, keys: Iterable[str]) -> str:
    """``text`` (an error a server's answer went into) without the API ``keys`` (a server
    may echo one back) or other secrets (it may echo the request)."""
    for key in keys:
        # a local server's placeholder ("EMPTY", "ollama") is no secret, and replacing
        # it would garble the words of the message that contain it
        if len(key) >= MIN_SECRET_KEY_CHARS:
            text = text.replace(key, "[REDACTED:api-key]")
    return redact_text(text)


MAX_TIMEOUTS_IN_A_ROW = 3
"""Calls that time out one after another before the judge stops calling: each left the
server generating for nobody, and more would queue behind them."""


def default_max_tokens(schema: type[BaseModel]) -> int:
    """The most tokens a reply to ``schema`` may take: 512 for a fixed set of fields, 2,048
    when it holds a list (one verdict per call or step, a plan): generous for any honest
    answer, and a bound on a runaway reply."""
    properties = json_schema(schema).get("properties", {})
    has_list = any(field.get("type") == "array" for field in properties.values())
    return 2048 if has_list else 512


class _Probe(BaseModel):
    ok: bool


class OpenAIJudge(BaseJudge):
    """An LLM judge over the OpenAI chat-completions API.

    Asks for structured output as ``output_mode`` says (see :data:`OutputMode`). With
    ``auto`` (the default), the preflight check sends one small request per mode, from a JSON
    schema down to plain text, and keeps the first the server accepts (once per endpoint and
    model in a process); a server that refuses a format during scoring (an HTTP error whose
    body names ``response_format``, be it 400 or llama-cpp-python's 500) is asked in the next
    mode, never retried as an outage. The reply is parsed tolerantly in every mode.

    Args:
        model: the judge model's name.
        base_url: the API root (``$OPENAI_BASE_URL``, else ``https://api.openai.com/v1``).
        api_key: ``$OPENAI_API_KEY`` when not given; local servers need none.
        headers: extra HTTP headers.
        requests_per_period, period: rate limit (asyncio-throttle).
        max_concurrency: requests in flight at once.
        max_retries: retries on 429, 5xx, timeouts and connection errors (honouring Retry-After).
        backoff_base: first backoff in seconds (doubles per retry, full jitter, capped at 20 s).
        timeout: seconds one HTTP call may take in all, from connecting to the last byte of
            the response, so a server that trickles its answer cannot hold a call open; each
            retry is logged at INFO. Default 20, or 180 once the model is found to be a
            reasoning model (it takes ``max_completion_tokens``: o-series, gpt-5), which
            reasons for thousands of tokens before it answers.
        max_response_bytes: the largest response body read (default 4 MiB, counted after
            decompression while it is read): a larger one is refused as an invalid answer
            before it can take the process's memory (the result says "judge unavailable").
        output_mode: ``auto``, ``json_schema``, ``json_object`` or ``text``
            (``$AGENTEVAL_JUDGE_OUTPUT_MODE``, else ``auto``).
        max_tokens: the most tokens a reply may take (default: by the reply's schema, see
            :func:`default_max_tokens`), so a runaway reply cannot run forever.
        retry_timeouts: send a call that timed out again. Off by default: the server is
            usually still generating for the client that left, and a retry queues behind it;
            such a call counts as abandoned, its prompt tokens estimated. After 3 timeouts in
            a row the judge stops calling (every later result says why).
        max_input_tokens: cut each piece of the run a stage sends (the request, the calls,
            the answer, ...) to an equal share of this many tokens (4 characters a token),
            for a model whose context the prompts overflow.
        result_deadline: seconds one metric's result may take in all (its stages, re-asks
            and retries); past it the result is "judge unavailable" and says so.
        max_parse_retries: re-asks after a reply that does not parse.
        cache: a :class:`JudgeCache`; default the on-disk cache; ``None`` disables it.
        prices: USD per million (input, output) tokens, or (input, output, cached input),
            merged over the defaults.
        share_stages: ask a stage that several metrics share for one trace (task and plan
            extraction) once, and hand its answer to each; ``False`` asks every time.
        budget_usd: stop making calls once the estimated spend reaches this; what could not
            be scored then says "budget exhausted" (needs the model's price).
        budget_usd_per_hour: the same over any rolling hour, for online scoring.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        requests_per_period: int = 10,
        period: float = 1.0,
        max_concurrency: int = 8,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        timeout: float | None = None,
        max_parse_retries: int = 2,
        temperature: float = 0.0,
        cache: JudgeCache | None = DEFAULT_CACHE,
        prices: dict[str, Price] | None = None,
        share_stages: bool = True,
        budget_usd: float | None = None,
        budget_usd_per_hour: float | None = None,
        output_mode: OutputMode | None = None,
        max_tokens: int | None = None,
        retry_timeouts: bool = False,
        max_input_tokens: int | None = None,
        result_deadline: float | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        chosen = output_mode or os.environ.get("AGENTEVAL_JUDGE_OUTPUT_MODE") or "auto"
        if chosen not in OUTPUT_MODES:
            raise JudgeConfigError(
                f"judge output mode {chosen!r} is not one of {', '.join(OUTPUT_MODES)} "
                "(--judge-output-mode, $AGENTEVAL_JUDGE_OUTPUT_MODE)"
            )
        if max_tokens is not None and max_tokens < 1:
            raise JudgeConfigError(f"max_tokens must be >= 1, got {max_tokens}")
        super().__init__(
            cache=cache,
            max_parse_retries=max_parse_retries,
            prices=prices,
            share_stages=share_stages,
            budget_usd=budget_usd,
            budget_usd_per_hour=budget_usd_per_hour,
        )
        self._model = model
        self._require_price()
        self.base_url = (
            base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        ).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"
        # the encodings whose inflation _read_bounded bounds
        self.headers.setdefault("Accept-Encoding", "gzip, deflate")
        self._timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.temperature = temperature
        self.traffic = Traffic(
            requests_per_period=requests_per_period,
            period=period,
            max_concurrency=max_concurrency,
            max_retries=max_retries,
            backoff_base=backoff_base,
            retry_timeouts=retry_timeouts,
        )
        self.output_mode: OutputMode = chosen
        self.mode: Mode = "json_schema" if chosen == "auto" else chosen
        self._shape = _SHAPES.get((self.base_url, model), _RequestShape())
        self.max_tokens = max_tokens
        self.max_input_tokens = max_input_tokens
        self.result_deadline = result_deadline
        self._timeouts_in_a_row = 0
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"OpenAIJudge(model={self._model!r}, base_url={self.base_url!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_clients"] = None  # connections belong to this process's event loops
        state["_timeouts_in_a_row"] = 0
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._clients = weakref.WeakKeyDictionary()

    @property
    def model(self) -> str:
        return self._model

    @property
    def timeout(self) -> float:
        """Seconds one call may take in all: the one given, else :data:`DEFAULT_TIMEOUT`,
        or :data:`REASONING_TIMEOUT` for a model found to be a reasoning model."""
        if self._timeout is not None:
            return self._timeout
        reasoning = self._shape.token_field == "max_completion_tokens"
        return REASONING_TIMEOUT if reasoning else DEFAULT_TIMEOUT

    def _client(self) -> httpx.AsyncClient:
        # an httpx client belongs to the event loop it was made on
        key = asyncio.get_running_loop()
        client = self._clients.get(key)
        if client is None or client.is_closed:
            client = httpx.AsyncClient(timeout=self.timeout, headers=self.headers)
            self._clients[key] = client
        return client

    async def preflight(self, timeout: float = 5.0) -> None:
        """Check, before anything is scored, that this judge can be used: a valid base URL,
        an API key for a hosted endpoint, a server that answers, and one that accepts the
        key. Raises :class:`JudgeConfigError` naming what to fix. A 404 where the same URL
        with ``/v1`` answers names that URL; otherwise a server that does not list its
        models (404, 405, 501) is given the benefit of the doubt."""
        url = httpx.URL(self.base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise JudgeConfigError(
                f"judge base URL {self.base_url!r} is not an http(s) URL; set --judge-base-url "
                "(or OPENAI_BASE_URL) to an API root such as http://localhost:8000/v1"
            )
        if url.host.endswith("openai.com") and "Authorization" not in self.headers:
            raise JudgeConfigError(
                f"no API key for {self.base_url}; set OPENAI_API_KEY or pass --judge-api-key"
            )
        try:
            async with httpx.AsyncClient(timeout=timeout, headers=self.headers) as client:
                response = await client.get(api_url(self.base_url, "/models"))
                api_root = api_url(self.base_url, "/v1")
                if response.status_code == 404 and not url.path.rstrip("/").endswith("/v1"):
                    # the commonest slip: the server's root instead of its API root
                    with contextlib.suppress(httpx.HTTPError):
                        answer = await client.get(api_url(api_root, "/models"))
                        if answer.status_code == 200:
                            raise JudgeConfigError(
                                f"the judge at {self.base_url} has no API there (HTTP 404), but "
                                f"{api_root} answers; set --judge-base-url to {api_root}"
                            )
        except httpx.TimeoutException:
            raise JudgeConfigError(
                f"the judge at {self.base_url} did not answer within {timeout:g} s; "
                "check --judge-base-url"
            ) from None
        except httpx.TransportError as exc:
            raise JudgeConfigError(
                f"cannot reach the judge at {self.base_url} ({type(exc).__name__}); "
                "check --judge-base-url and that the server is running"
            ) from None
        if response.status_code in (401, 403):
            raise JudgeConfigError(
                f"the judge at {self.base_url} rejected the API key (HTTP "
                f"{response.status_code}); set OPENAI_API_KEY or pass --judge-api-key"
            )
        if response.status_code == 400 and b"API_KEY_INVALID" in response.content:
            # Google's APIs (Gemini's OpenAI-compatible one) refuse a bad key with a 400
            said = re.search(r'"message":\s*"([^"]{1,200})"', response.text)
            raise JudgeConfigError(
                self._scrub(
                    f"the judge at {self.base_url} rejected the API key (HTTP 400: "
                    f"{said.group(1) if said else 'API_KEY_INVALID'}); set OPENAI_API_KEY or "
                    "pass --judge-api-key"
                )
            )
        await self._find_output_mode()

    async def _find_output_mode(self) -> None:
        """Ask once per mode, from the richest, until the server accepts one (``auto``), or
        check that it accepts the mode asked for. A server that is slow or errs for another
        reason gets the benefit of the doubt: scoring will say what is wrong."""
        known = _ACCEPTED.get((self.base_url, self._model))
        if self.output_mode == "auto" and known is not None:
            self.mode = known
            return
        refusals: list[str] = []
        async with httpx.AsyncClient(timeout=self.timeout, headers=self.headers) as client:
            while True:
                payload = self._payload(
                    [{"role": "user", "content": 'Reply with the JSON object {"ok": true}.'}],
                    _Probe,
                    max_tokens=16,
                )
                try:
                    response = await client.post(
                        api_url(self.base_url, "/chat/completions"), json=payload
                    )
                except httpx.HTTPError:
                    return
                self.stats.probes += 1
                if self._takes_what_was_refused(response):
                    continue
                if not _refuses_format(response):
                    if response.status_code < 400:
                        _ACCEPTED[(self.base_url, self._model)] = self.mode
                    return
                refusals.append(f"{self.mode}: HTTP {response.status_code} {response.text[:160]!r}")
                if self.output_mode != "auto" or self.mode == "text":
                    raise JudgeConfigError(
                        self._scrub(
                            f"the judge at {self.base_url} refuses the output mode "
                            f"{self.mode} ({'; '.join(refusals)}); pass --judge-output-mode "
                            "auto (or json_object, or text)"
                        )
                    )
                self.mode = _FALLBACK[self.mode]

    def _payload(
        self,
        messages: list[dict[str, str]],
        schema: type[BaseModel],
        *,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        shape = self._shape
        limit = max_tokens or self.max_tokens
        if limit is None:
            limit = default_max_tokens(schema)
            if shape.token_field == "max_completion_tokens":
                limit += REASONING_ALLOWANCE
        payload: dict[str, Any] = {
            "model": self._model,
            "messages": messages,
            shape.token_field: limit,
        }
        if shape.temperature:
            payload["temperature"] = self.temperature
        if self.mode == "json_schema":
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.__name__, "schema": json_schema(schema)},
            }
        elif self.mode == "json_object":
            payload["response_format"] = {"type": "json_object"}
        return payload

    async def _complete(
        self, messages: list[dict[str, str]], schema: type[BaseModel]
    ) -> Completion:
        if self._timeouts_in_a_row >= MAX_TIMEOUTS_IN_A_ROW:
            raise JudgeUnavailableError(
                f"not called: {self._timeouts_in_a_row} calls in a row timed out after "
                f"{self.timeout:g} s, so the server is slower than --judge-timeout or stuck; "
                "raise --judge-timeout (or lower --judge-concurrency) and replay"
            )
        client = self._client()
        url = api_url(self.base_url, "/chat/completions")
        calls = 0

        async def post() -> httpx.Response:
            nonlocal calls
            if not calls:
                # checked again once the request has its slot: calls queued behind the
                # concurrency bound were admitted while the spend was still below the budget
                await self._check_budget()
            calls += 1
            return await _bounded_post(
                client, url, payload, timeout=self.timeout, max_bytes=self.max_response_bytes
            )

        while True:
            payload = self._payload(messages, schema)
            try:
                response = await self.traffic.send(post, final=_refuses_format)
            except JudgeError as exc:
                exc.args = (self._scrub(str(exc)),)
                exc.usage.calls += calls
                if exc.usage.abandoned:  # its prompt was sent: estimate what it cost
                    self._timeouts_in_a_row += 1
                    exc.usage.estimated_input_tokens += len(json.dumps(messages)) // 4
                raise
            self._timeouts_in_a_row = 0
            refused = refusal_completion(response, messages)
            if refused is not None:  # a refused reply or prompt, not a bad request
                refused.calls = calls
                return refused
            if self._takes_what_was_refused(response):
                continue
            if _refuses_format(response) and self.output_mode == "auto" and self.mode != "text":
                logger.info(
                    "agenteval: the judge at %s refuses output mode %s (HTTP %d); asking in %s",
                    self.base_url,
                    self.mode,
                    response.status_code,
                    _FALLBACK[self.mode],
                )
                self.mode = _FALLBACK[self.mode]
                _ACCEPTED[(self.base_url, self._model)] = self.mode
                continue
            if response.status_code >= 400:
                raise self._refusal(response, url, calls)
            completion = _completion(response, messages)
            completion.calls = calls
            return completion

    def _takes_what_was_refused(self, response: httpx.Response) -> bool:
        """Whether the server refused a parameter this model does not take, now renamed or
        left out for this endpoint and model (the caller asks again)."""
        refused = _refused_parameter(response)
        shape = self._shape
        if refused == "max_tokens" and shape.token_field == "max_tokens":
            shape = replace(shape, token_field="max_completion_tokens")
        elif refused == "temperature" and shape.temperature:
            shape = replace(shape, temperature=False)
        else:
            return False
        self._shape = _SHAPES[(self.base_url, self._model)] = shape
        logger.info(
            "agenteval: %s at %s does not take %s (HTTP 400); asking %s",
            self._model,
            self.base_url,
            refused,
            f"with max_completion_tokens, a reasoning model's limit, and {self.timeout:g} s a call"
            if refused == "max_tokens"
            else "at its default temperature",
        )
        return True

    def _refusal(self, response: httpx.Response, url: str, calls: int) -> JudgeError:
        """The error an HTTP error status is, by what replaying could do about it."""
        body = response.text[:300]
        error: JudgeError
        if _refuses_format(response):
            error = JudgeUnsupportedRequestError(
                f"the server refuses output mode {self.mode} (HTTP {response.status_code}: "
                f"{body}); pass --judge-output-mode auto, json_object or text"
            )
        elif response.status_code < 500 and CONTEXT_WORDS.search(response.text[:4000]):
            error = JudgeContextOverflowError(
                f"the prompt is longer than {self._model}'s context (HTTP "
                f"{response.status_code}: {body}); replaying gives the same: judge with a "
                "longer-context model, or shorten the trace's inputs and outputs"
            )
        elif response.status_code < 500:
            error = JudgeUnsupportedRequestError(
                f"HTTP {response.status_code} from {url}: {body}; replaying gives the same: "
                "check --judge-model and the judge options"
            )
        else:
            error = JudgeUnavailableError(f"HTTP {response.status_code} from {url}: {body}")
        error.args = (self._scrub(str(error)),)
        error.usage.calls = calls
        return error

    def _scrub(self, text: str) -> str:
        """An error text without this judge's API key (a server may echo it back) or other
        secrets (it may echo the prompt)."""
        return scrub_keys(text, header_keys(self.headers))

    async def aclose(self) -> None:
        """Close this event loop's HTTP client."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> OpenAIJudge:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def _bounded_post(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    *,
    timeout: float,
    max_bytes: int,
) -> httpx.Response:
    """POST and read the response within ``timeout`` seconds in all (httpx's own timeout is
    per read: a byte every few seconds would keep a call open for ever) and at most
    ``max_bytes`` of body, counted as it is decompressed (a small gzip body can inflate to
    gigabytes)."""
    try:
        async with (
            asyncio.timeout(timeout),
            client.stream("POST", url, json=payload, timeout=timeout) as response,
        ):
            body = await _read_bounded(response, max_bytes)
    except TimeoutError:
        raise httpx.ReadTimeout(f"no whole response within {timeout:g} s") from None
    headers = [
        (name, value)
        for name, value in response.headers.multi_items()
        if name.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    return httpx.Response(
        response.status_code, headers=headers, content=bytes(body), request=response.request
    )


async def _read_bounded(response: httpx.Response, max_bytes: int) -> bytes:
    """The decoded body, refused as soon as it is over ``max_bytes``. gzip and deflate are
    inflated here with an output bound per step, so one small compressed chunk cannot expand
    to more than the limit in memory."""
    body = bytearray()

    def take(data: bytes) -> None:
        body.extend(data)
        if len(body) > max_bytes:
            raise JudgeUnavailableError(
                f"the response body is over {max_bytes:,} bytes (read so far: {len(body):,}); "
                "refused unread, since a verdict takes a few kilobytes (raise "
                "OpenAIJudge(max_response_bytes=...) if yours is really this long)"
            )

    if response.headers.get("content-encoding", "").strip().lower() not in ("gzip", "deflate"):
        async for chunk in response.aiter_bytes():
            take(chunk)
        return bytes(body)
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or zlib header, detected
    async for raw in response.aiter_raw():
        pending = raw
        while pending:
            take(inflater.decompress(pending, max_bytes + 1 - len(body)))
            pending = inflater.unconsumed_tail
    take(inflater.flush())
    return bytes(body)


def _token_count(value: Any) -> int | None:
    """A token count as a server reports it, or None when it is not one (``"lots"``, a
    negative number, ``1e309``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value.is_integer():
        return int(value)
    return None


def _cached_tokens(usage: dict[str, Any]) -> int:
    """The prompt tokens the server read from its cache (OpenAI's
    ``usage.prompt_tokens_details.cached_tokens``; 0 when it does not say or says it in a
    form that is no count, so they are billed at the full input price)."""
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict):
        return 0
    return _token_count(details.get("cached_tokens", 0)) or 0


def _completion(response: httpx.Response, messages: list[dict[str, str]]) -> Completion:
    """The text and usage of a chat-completions response; a malformed body reads as its text,
    so it goes through the same parse-and-re-ask path as a malformed reply. Usage the server
    reports in a form that is not a token count is estimated (characters / 4) and marked, so
    the verdict is kept and a budget still counts the call."""
    try:
        body = response.json()
        choice = body["choices"][0]
        message = choice["message"]
        text = reply_text(message["content"])
        finish = choice.get("finish_reason")
        refusal = message.get("refusal")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return Completion(text=response.text[:2000])
    ending: dict[str, Any] = {
        "cut_at_limit": finish == "length",
        "filtered": f"withheld the reply (finish reason {finish})"
        if finish == "content_filter"
        else None,
        "refusal": refusal if isinstance(refusal, str) and refusal.strip() else None,
    }
    usage = body.get("usage")
    if not usage:  # not reported (many local servers): nothing to count
        return Completion(text=text, **ending)
    reported = usage if isinstance(usage, dict) else {}
    input_tokens = _token_count(reported.get("prompt_tokens", 0)) if reported else None
    output_tokens = _token_count(reported.get("completion_tokens", 0)) if reported else None
    if input_tokens is not None and output_tokens is not None:
        return Completion(
            text=text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_input_tokens=_cached_tokens(reported),
            **ending,
        )
    return Completion(
        text=text,
        input_tokens=len(json.dumps(messages)) // 4 if input_tokens is None else input_tokens,
        output_tokens=len(text) // 4 if output_tokens is None else output_tokens,
        usage_estimated=True,
        **ending,
    )
