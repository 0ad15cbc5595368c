"""Reading a judge's reply: the JSON object in it, validated against the expected schema."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["ReplyError", "parse_reply", "reply_text"]

T = TypeVar("T", bound=BaseModel)

_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)
# a reasoning model's thinking, written before its answer when the server leaves it in the
# content (DeepSeek-R1 and its distillations, QwQ, Qwen3 on vLLM without a reasoning
# parser, llama.cpp, LM Studio); R1's template opens the block in the prompt, so the reply
# may hold only its end
_REASONING_TAG = r"(think|thinking|reasoning)"
_LEADING_REASONING = re.compile(rf"\s*<{_REASONING_TAG}>.*?</\1>", re.DOTALL | re.IGNORECASE)
_OPENED = re.compile(rf"\s*<{_REASONING_TAG}>", re.IGNORECASE)
_CLOSED = re.compile(rf"</{_REASONING_TAG}>", re.IGNORECASE)


_REASONING_PARTS = frozenset({"thinking", "reasoning", "redacted_thinking"})


def reply_text(content: Any) -> str:
    """A reply's content as text. A string is kept as it is. From a list of content parts
    (Mistral's Magistral answers so through its OpenAI-compatible API; LangChain's content
    blocks), the text of each part, leaving out the parts that hold the model's reasoning.
    Any other value (an object where text belongs) is read as its JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part
            if isinstance(part, str)
            else part["text"]
            if isinstance(part, dict)
            and part.get("type", "text") not in _REASONING_PARTS
            and isinstance(part.get("text"), str)
            else ""
            for part in content
        )
    return json.dumps(content)


class ReplyError(ValueError):
    """A reply that is not the JSON the schema asks for; the message says what is wrong."""


def _answer(text: str) -> str:
    """The reply after the reasoning a model wrote before its answer (braces in it, a JSON
    draft, would be read as the answer or break it)."""
    while leading := _LEADING_REASONING.match(text):
        text = text[leading.end() :]
    opened = _OPENED.match(text)
    if opened:
        raise ReplyError(
            f"the reply is truncated: it stops inside its <{opened.group(1)}> reasoning, "
            "before the answer"
        )
    closed = _CLOSED.search(text)
    if closed and not text.lstrip().startswith("{"):  # not inside an answer's string
        before = text[: closed.start()].lower()
        if "<" + closed.group(1).lower() not in before:
            text = text[closed.end() :]  # the block was opened in the prompt
    return text


def _json_object(text: str) -> Any:
    stripped = text.strip()
    candidates = [stripped]
    candidates += [match.group(1) for match in _FENCE.finditer(text)]
    start, end = stripped.find("{"), stripped.rfind("}")
    if 0 <= start < end:
        candidates.append(stripped[start : end + 1])  # prose around one object
    first_error: json.JSONDecodeError | None = None
    for candidate in candidates:
        try:
            # strict=False: a raw newline or tab inside a string (small local models write
            # them) is still the complete object the model meant; nothing is repaired
            return json.loads(candidate, strict=False)
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
    if start < 0:
        raise ReplyError("the reply is not JSON: it holds no '{'")
    if end <= start or (first_error is not None and first_error.pos >= len(stripped) - 1):
        raise ReplyError("the reply is truncated: its JSON object never closes")
    assert first_error is not None
    raise ReplyError(
        f"the reply's JSON does not parse: {first_error.msg} at line {first_error.lineno}, "
        f"column {first_error.colno}"
    )


def parse_reply(text: str, schema: type[T]) -> T:
    """The reply's JSON object validated against ``schema``; ``ReplyError`` says why not.

    Accepts a bare object, one inside a fenced code block, or one surrounded by prose, after
    the ``<think>`` block a reasoning model may write first (its reasoning is never read as
    the answer; a reply that stops inside it is truncated). It never repairs JSON: a
    truncated object is an error, so the judge is asked again. Fields are validated
    strictly: a boolean or a string where the schema has a number is an error (JSON's
    ``true`` would otherwise read as a perfect 1.0).
    """
    if not text or not text.strip():
        raise ReplyError("the reply is empty")
    text = _answer(text)
    if not text.strip():
        raise ReplyError("the reply holds reasoning and no answer after it")
    data = _json_object(text)
    if not isinstance(data, dict):
        raise ReplyError(f"the reply is JSON but not an object: {type(data).__name__}")
    try:
        # strict: a number field takes a number only; true or "0.8" is no score
        return schema.model_validate(data, strict=True)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'reply'}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise ReplyError(f"the reply does not match the schema: {problems}") from exc
