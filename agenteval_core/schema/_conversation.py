"""Conversations that model calls resend, held and written once.

Each call of an agent's model is sent the whole conversation again: the system prompt, the
request, and every earlier reply and tool result. Held as it came, the ``n``-th call's input
repeats the ``n - 1`` calls before it, so a run of 300 tool calls with 2 KB results held
45,000 message copies (about 400 MB) and wrote a 119 MB line. A model call's messages that
an earlier call of its run was also sent are therefore held as the same objects (see
:func:`share_conversation`) and written as a reference to that call (see
:func:`written_conversations`); reading a line rebuilds the whole input (see
:func:`rebuild_conversations`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._trace import Span

__all__ = [
    "SHARED_INPUT",
    "messages_of",
    "rebuild_conversations",
    "share_conversation",
    "written_conversations",
]

SHARED_INPUT = "agenteval.input.shared"
"""Span attribute of a capture line, never of a trace in memory: ``{"span": ID, "messages":
N}`` on a model call whose input, as written, leaves out its first ``N`` messages, which are
the first ``N`` of the earlier model call ``ID`` of the same line."""

LOOKBACK = 8
"""Earlier model calls of a run a call's conversation is matched against: in a run of
several agents, the call before is often another agent's."""

MIN_SHARED = 2
"""Fewest shared messages worth a reference (one is usually a short system prompt)."""


def messages_of(value: Any) -> list[Any] | None:
    """The conversation a model call's input holds: the one prompt of LangChain's
    ``[[message, ...]]``, or a list of message dicts (LlamaIndex, CrewAI, imports);
    ``None`` for any other input."""
    if type(value) is not list:
        return None
    if len(value) == 1 and type(value[0]) is list:
        return value[0]
    if all(type(message) is dict for message in value):
        return value
    return None


def _shared(messages: list[Any], earlier: list[Any]) -> int:
    """How many first messages two conversations have in common (equal, or the same
    objects; compared in C, so a call extending the call before costs one pass)."""
    size = min(len(messages), len(earlier))
    try:
        if messages[:size] == earlier[:size]:
            return size
        count = 0
        while messages[count] is earlier[count] or messages[count] == earlier[count]:
            count += 1
        return count
    except Exception:  # a trace built by hand may hold values that refuse to compare
        return 0


def _best_earlier(
    messages: list[Any], earlier: Sequence[Span], before: int
) -> tuple[int, int] | None:
    """The model call among the last :data:`LOOKBACK` of ``earlier[:before]`` whose
    conversation starts the way ``messages`` does for longest: its index and how many
    messages they share (at least :data:`MIN_SHARED`)."""
    from ._trace import SpanKind

    best: tuple[int, int] | None = None
    looked = 0
    for index in range(before - 1, -1, -1):
        span = earlier[index]
        if span.kind is not SpanKind.LLM:
            continue
        previous = messages_of(span.input)
        if previous:
            shared = _shared(messages, previous)
            if shared >= MIN_SHARED and (best is None or shared > best[1]):
                best = (index, shared)
            if shared == len(previous):  # this call extends that one: none shares more
                break
        looked += 1
        if looked == LOOKBACK:
            break
    return best


def share_conversation(messages: list[Any], earlier: Sequence[Span]) -> None:
    """Make the messages a new model call was sent that an earlier call of its run was sent
    too the earlier call's own objects (in place), so a long run holds each message once."""
    if not messages:
        return
    found = _best_earlier(messages, earlier, len(earlier))
    if found is not None:
        index, shared = found
        previous = messages_of(earlier[index].input)
        assert previous is not None
        messages[:shared] = previous[:shared]


def _rest(value: list[Any], shared: int) -> list[Any]:
    """A model call's input without its first ``shared`` messages, in its own shape."""
    if len(value) == 1 and type(value[0]) is list:
        return [value[0][shared:]]
    return value[shared:]


def written_conversations(spans: list[Span]) -> list[Span] | None:
    """The spans as a capture line writes them: a model call that shares at least
    :data:`MIN_SHARED` first messages with one of the model calls before it holds only the
    rest, and says which call and how many (:data:`SHARED_INPUT`); ``None`` when no call
    shares any. The spans themselves are not changed."""
    from ._trace import SpanKind

    written: list[Span] | None = None
    for index, span in enumerate(spans):
        if span.kind is not SpanKind.LLM:
            continue
        messages = messages_of(span.input)
        if not messages:
            continue
        found = _best_earlier(messages, spans, index)
        if found is None:
            continue
        earlier, shared = found
        if written is None:
            if len({span.id for span in spans}) < len(spans):
                return None  # a trace built by hand with two spans of one id: no reference
            written = list(spans)
        reference = {"span": spans[earlier].id, "messages": shared}
        written[index] = span.model_copy(
            update={
                "input": _rest(span.input, shared),
                "attributes": {**span.attributes, SHARED_INPUT: reference},
            }
        )
    return written


def rebuild_conversations(spans: list[Span]) -> None:
    """Give each model call of a line read its whole input back (in place): the messages it
    shares with an earlier call are that call's own objects. A reference that names no
    earlier model call, or more messages than it has, is left as written, attribute and all:
    what the line holds is kept, not guessed at."""
    by_id: dict[str, Span] = {}
    for span in spans:
        reference = span.attributes.get(SHARED_INPUT)
        if reference is not None:
            _rebuild(span, reference, by_id)
        by_id[span.id] = span


def _rebuild(span: Span, reference: Any, by_id: dict[str, Span]) -> None:
    if type(reference) is not dict:
        return
    earlier, shared = by_id.get(str(reference.get("span"))), reference.get("messages")
    previous = messages_of(earlier.input) if earlier is not None else None
    rest = messages_of(span.input)
    if previous is None or rest is None or type(shared) is not int:
        return
    if not 0 < shared <= len(previous):
        return
    whole = previous[:shared] + rest
    span.input = [whole] if span.input and rest is span.input[0] else whole
    del span.attributes[SHARED_INPUT]
