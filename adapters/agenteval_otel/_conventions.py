"""One agenteval span → OpenTelemetry attributes, in three vocabularies at once.

- The GenAI semantic conventions (``gen_ai.*``): operation and span names, provider, model,
  tokens, messages, tool definitions, tool calls, ``error.type``.
- OpenInference (``openinference.span.kind``, ``input.value``, ``llm.*``, ``tool.*``,
  ``session.id``), which Arize Phoenix reads to show inputs, outputs and messages.
- ``agenteval.*`` for what neither has a name for (run status, alerts, thoughts, exact ids),
  so an export re-imports to an equal trace.

Kept free of the SDK: the importer reads the same names back.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from fractions import Fraction
from typing import Any

from agenteval_core import (
    AGENT_NAME,
    OTEL_OPERATION_NAMES,
    REASONING,
    MetricResult,
    SpanKind,
    ToolCall,
    ToolSpec,
    Trace,
    text_of,
)
from agenteval_core import Span as AgentSpan
from agenteval_core.recording import (
    FINISH_REASONS,
    INPUT_TOKENS,
    MEDIA_BLOCK_TYPES,
    OPERATION_NAME,
    OUTPUT_TOKENS,
    PROVIDER_NAME,
    REQUEST_MODEL,
    cut_within,
    fit_json,
    media_kind,
)

WORKFLOW = "invoke_workflow"

OPENINFERENCE_KINDS: dict[SpanKind, str] = {
    SpanKind.AGENT: "AGENT",
    SpanKind.LLM: "LLM",
    SpanKind.TOOL: "TOOL",
    SpanKind.RETRIEVER: "RETRIEVER",
    SpanKind.CHAIN: "CHAIN",
    SpanKind.TASK: "CHAIN",
}

JSON_MIME = "application/json"
TEXT_MIME = "text/plain"
OWN = "agenteval.span.attributes"
"""Names of the span's own attributes (the rest are derived for the vocabularies)."""
SPANLESS = "agenteval.trace.spanless"
"""On the one span exported for a trace that has none (built by hand): import drops it."""
ENCODED = "agenteval.encoded"
"""Names of the span's own attributes that were JSON-encoded to fit OpenTelemetry's types."""
FROM_TRACE = "agenteval.span.values_from_trace"
"""On a root span that has no input (or output) of its own: ``input.value`` (``output.value``)
shows the run's, so a backend's trace list is not blank; import drops them again."""

UNREADABLE = "agenteval.otel.unreadable"
"""On an imported span: the names of the attributes of agenteval's export that the file
holds cut past reading (a JSON value cut as text past a length limit, see
:func:`within_length`, or by a collector): what they held is unknown, not empty."""
OWN_JSON: dict[str, type] = {
    "agenteval.requested_tool_calls": list,
    "agenteval.trace.tools": list,
    "agenteval.trace.alerts": list,
    "metadata": dict,
    "gen_ai.tool.call.arguments": dict,
}
"""The attributes of agenteval's export that the import reads into records, with the JSON
type each holds."""

_ROLES = {"human": "user", "ai": "assistant", "function": "tool", "developer": "system"}


class _Json(str):
    """A value :func:`dumps` encoded: cut to a length (:func:`within_length`), it stays JSON."""

    __slots__ = ()


def dumps(value: Any) -> str:
    return _Json(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))


def _digest(*parts: str, size: int) -> int:
    text = "\x00".join(parts).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(text).digest()[:size], "big") or 1  # 0 is invalid


def otel_ids(trace_id: str, span_id: str) -> tuple[int, int]:
    """The OpenTelemetry trace and span id an agenteval span is exported under: derived from
    agenteval's own ids (SHA-256), so exporting a trace again gives the same ids and a
    backend updates the trace instead of showing it twice."""
    return _digest("agenteval", trace_id, size=16), _digest(trace_id, span_id, size=8)


def to_ns(seconds: float | None) -> int | None:
    """Seconds → integer nanoseconds, exactly: ``from_ns(to_ns(t)) == t`` for every float ``t``
    a clock gives (the exact rational, not ``t * 1e9``, which can be 128 ns off)."""
    return None if seconds is None else round(Fraction(seconds) * 1_000_000_000)


def from_ns(nanoseconds: int) -> float:
    return nanoseconds / 1_000_000_000  # int / int is correctly rounded


def value_attributes(prefix: str, value: Any, encoded: str | None = None) -> dict[str, Any]:
    """``input.value`` / ``output.value`` with their MIME type: text stays text, anything
    else is JSON (``encoded``, when the caller already made it), so the importer restores
    the exact value."""
    if value is None:
        return {}
    if isinstance(value, str):
        return {f"{prefix}.value": value, f"{prefix}.mime_type": TEXT_MIME}
    return {f"{prefix}.value": encoded or dumps(value), f"{prefix}.mime_type": JSON_MIME}


def error_type(error: str) -> str:
    """``error.type``: the exception class when the text starts with one (``ValueError: x``),
    else ``_OTHER`` as the conventions ask."""
    head, sep, _ = error.partition(":")
    head = head.strip().rsplit(".", 1)[-1]
    return head if sep and head.isidentifier() and head[:1].isupper() else "_OTHER"


def _text_part(content: Any) -> dict[str, Any]:
    return {"type": "text", "content": text_of(content)}


def _call_part(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}


def _content_parts(content: Any) -> list[dict[str, Any]]:
    """A message's content as GenAI parts: its text, or for a list of content blocks a part
    per block (text, reasoning, media as a ``blob`` of base64 or a ``uri``). A tool-use block
    is the message's tool call (its ``tool_calls``); a block of another kind is kept as its
    JSON text."""
    if content in (None, ""):
        return []
    if not isinstance(content, list):
        return [_text_part(content)]
    parts = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if isinstance(block, str) or kind == "text":
            parts.append(_text_part(block if isinstance(block, str) else block.get("text")))
        elif kind in ("thinking", "reasoning"):
            said = block.get(kind, block.get("text"))
            parts.append({"type": "reasoning", "content": text_of(said)})
        elif kind not in ("tool_use", "tool_call", "function_call"):
            parts.append(_media_part(block) or _text_part(block))
    return parts


def _media_part(block: dict[str, Any]) -> dict[str, Any] | None:
    """A media block as a ``blob`` (its base64 inline, a data URL's included) or a ``uri``
    part, with its modality and MIME type; ``None`` when it is no media block or says
    neither where nor what its data is."""
    kind = str(block.get("type"))
    if kind not in MEDIA_BLOCK_TYPES:
        return None
    inner = block.get(kind)  # OpenAI's {"image_url": {"url"}}, {"input_audio": {"data"}}
    nested = inner if isinstance(inner, dict) else {}
    given = block.get("source")  # Anthropic's {"type": "base64", "media_type", "data"}
    source: dict[str, Any] = given if isinstance(given, dict) else {}
    url = block.get("url") or nested.get("url") or source.get("url")
    if url is None and isinstance(inner, str):
        url = inner
    data = block.get("base64") or block.get("data") or source.get("data") or nested.get("data")
    audio = nested.get("format") or block.get("format")
    mime = block.get("mime_type") or source.get("media_type") or (audio and f"audio/{audio}")
    if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
        header, _, data = url.partition(";base64,")
        mime, url = header.removeprefix("data:").split(";")[0] or mime, None
    modality = media_kind(kind)
    if isinstance(mime, str) and mime.split("/")[0] in ("image", "audio", "video"):
        modality = mime.split("/")[0]
    part: dict[str, Any] = {"modality": modality}
    if mime:
        part["mime_type"] = str(mime)
    if isinstance(data, str) and data:
        return {"type": "blob", **part, "content": data}
    if isinstance(url, str) and url:
        return {"type": "uri", **part, "uri": url}
    return None


def _message(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {"role": "user", "parts": [_text_part(raw)]}
    role = str(raw.get("role") or raw.get("type") or "user")
    message: dict[str, Any] = {"role": _ROLES.get(role, role), "parts": []}
    message["parts"].extend(_content_parts(raw.get("content")))
    for call in raw.get("tool_calls") or []:
        if isinstance(call, dict):
            message["parts"].append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": call.get("name") or (call.get("function") or {}).get("name"),
                    "arguments": call.get("args", call.get("arguments")),
                }
            )
    return message


def input_messages(value: Any) -> list[dict[str, Any]]:
    """An LLM span's input as ``gen_ai.input.messages``: a message list (LangChain passes a
    batch, a list of lists: the first is the one sent), or a prompt string as a user turn."""
    if value is None:
        return []
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        value = value[0]
    if isinstance(value, list):
        return [_message(raw) for raw in value]
    return [_message(value)]


def output_messages(span: AgentSpan) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if span.attributes.get(REASONING):
        parts.append({"type": "reasoning", "content": text_of(span.attributes[REASONING])})
    if span.output not in (None, ""):
        parts.append(_text_part(span.output))
    parts.extend(_call_part(call) for call in span.requested_tool_calls)
    if not parts and span.thought is None:
        return []
    said = span.attributes.get(FINISH_REASONS)  # as the provider said it, when recorded
    reason = (
        str(said[0])
        if isinstance(said, list) and said
        else "tool_call"
        if span.requested_tool_calls
        else ("error" if span.error else "stop")
    )
    return [{"role": "assistant", "parts": parts, "finish_reason": reason}]


def _openinference_messages(prefix: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for index, message in enumerate(messages):
        at = f"{prefix}.{index}.message"
        attributes[f"{at}.role"] = message["role"]
        texts = [p["content"] for p in message["parts"] if p["type"] == "text"]
        if texts:
            attributes[f"{at}.content"] = "\n".join(texts)
        if any(p.get("modality") == "image" for p in message["parts"]):
            attributes.update(_openinference_contents(at, message["parts"]))
        calls = [p for p in message["parts"] if p["type"] == "tool_call"]
        for number, call in enumerate(calls):
            base = f"{at}.tool_calls.{number}.tool_call"
            if call.get("id"):
                attributes[f"{base}.id"] = call["id"]
            attributes[f"{base}.function.name"] = call["name"] or ""
            attributes[f"{base}.function.arguments"] = dumps(call.get("arguments") or {})
    return attributes


def _openinference_contents(at: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A message's text and images as OpenInference's ``message.contents`` (what Phoenix
    shows an image from): an inline image as a data URL."""
    attributes: dict[str, Any] = {}
    shown = [p for p in parts if p["type"] == "text" or p.get("modality") == "image"]
    for number, part in enumerate(shown):
        base = f"{at}.contents.{number}.message_content"
        if part["type"] == "text":
            attributes[f"{base}.type"] = "text"
            attributes[f"{base}.text"] = part["content"]
        else:
            attributes[f"{base}.type"] = "image"
            attributes[f"{base}.image.image.url"] = (
                part["uri"]
                if part["type"] == "uri"
                else f"data:{part.get('mime_type', 'image/png')};base64,{part['content']}"
            )
    return attributes


def tool_definitions(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        }
        for tool in tools
    ]


def _llm_attributes(span: AgentSpan, trace: Trace) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    model = span.attributes.get(REQUEST_MODEL)
    if model:
        attributes["llm.model_name"] = model
    if span.attributes.get(PROVIDER_NAME):
        attributes["llm.provider"] = span.attributes[PROVIDER_NAME]
    tokens = {
        "prompt": span.attributes.get(INPUT_TOKENS),
        "completion": span.attributes.get(OUTPUT_TOKENS),
    }
    for name, count in tokens.items():
        if isinstance(count, int):
            attributes[f"llm.token_count.{name}"] = count
    if all(isinstance(count, int) for count in tokens.values()):
        attributes["llm.token_count.total"] = sum(tokens.values())
    sent = input_messages(span.input)
    answered = output_messages(span)
    if sent:
        attributes["gen_ai.input.messages"] = dumps(sent)
        attributes.update(_openinference_messages("llm.input_messages", sent))
    if answered:
        attributes["gen_ai.output.messages"] = dumps(answered)
        attributes.update(_openinference_messages("llm.output_messages", answered))
    if trace.tools:
        definitions = tool_definitions(trace.tools)
        attributes["gen_ai.tool.definitions"] = dumps(definitions)
        for index, definition in enumerate(definitions):
            attributes[f"llm.tools.{index}.tool.json_schema"] = dumps(definition)
    return attributes


INPUT_MESSAGES_LEFT_OUT = "agenteval.llm.input_messages.left_out"
"""How many of a model call's earliest messages its OpenInference copy
(``llm.input_messages.*``) leaves out, to keep the span within the SDK's attribute limit;
``gen_ai.input.messages`` and ``input.value`` hold them all."""

_COPIES = ("llm.input_messages.", "llm.output_messages.", "llm.tools.", "retrieval.documents.")
"""OpenInference's attribute-per-field copies of what a span also holds whole (its messages,
its tools offered, its documents), in the order they are given room under the limit."""


def within_limit(attributes: dict[str, Any], limit: int | None) -> dict[str, Any]:
    """A span's attributes within ``limit``, the most a span keeps (the SDK's span limits:
    128 unless configured): past it, the SDK drops the oldest set, and a model call of a
    long conversation (a field per message) had lost its kind, its id, its session and its
    operation, the attributes set first. OpenInference's copies give way, whole entries at
    a time: the messages a model call was sent keep the latest (numbered from 0, the count
    left out said), the others their first (the top documents, the first tools); the
    span's own attributes are set last."""
    if limit is None or len(attributes) <= limit:
        return attributes
    entries: dict[str, dict[int, dict[str, Any]]] = {
        prefix: defaultdict(dict) for prefix in _COPIES
    }
    own: dict[str, Any] = {}
    for key, value in attributes.items():
        prefix = next((p for p in _COPIES if key.startswith(p)), None)
        digits, _, field = key.removeprefix(prefix or "").partition(".")
        if prefix is None or not digits.isdigit():
            own[key] = value
        else:
            entries[prefix][int(digits)][field] = value
    room = limit - len(own) - 1  # the count of messages left out is an attribute too
    fitted: dict[str, Any] = {}
    for prefix, found in entries.items():
        order = sorted(found, reverse=prefix == "llm.input_messages.")
        kept: list[int] = []
        for number in order:
            if len(found[number]) > room:
                break
            room -= len(found[number])
            kept.append(number)
        kept.sort()
        for renumbered, number in enumerate(kept):
            fitted.update({f"{prefix}{renumbered}.{f}": v for f, v in found[number].items()})
        if prefix == "llm.input_messages." and len(kept) < len(found):
            own[INPUT_MESSAGES_LEFT_OUT] = len(found) - len(kept)
    return fitted | own


def within_length(attributes: dict[str, Any], limit: int | None) -> dict[str, Any]:
    """A span's attributes with each string value within ``limit`` characters, the longest
    the SDK keeps (its span limits: no limit unless configured, as by
    ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``). Past it the SDK cuts a value where the limit
    falls, unmarked, and a JSON value so cut (the calls a model asked for, the tools
    offered) could not be read back. Here a JSON value has its longest strings cut and stays
    JSON; text keeps its start; each cut string ends in the marker of its original size
    (``…[truncated: N characters in all]``), as the capture writer cuts. A JSON value whose
    keys and short strings alone take more room is cut as text, marked the same."""
    if limit is None:
        return attributes
    return {
        key: _within(value, limit) if isinstance(value, str) and len(value) > limit else value
        for key, value in attributes.items()
    }


def _within(value: str, limit: int) -> str:
    if isinstance(value, _Json):
        fitted = fit_json(value, limit, dumps)
        if fitted.fits:  # bytes, so its characters fit too
            return fitted.encoded.decode("utf-8", "surrogatepass")
    return cut_within(value, limit)


def _documents(found: Any) -> dict[str, Any]:
    """A retrieval's documents as OpenInference's ``retrieval.documents`` (what Phoenix lists
    for a retriever span): each one's id, text, score and metadata, from the adapters'
    forms (LlamaIndex's ``{"id", "content", "score"}``, a LangChain ``Document``'s
    ``page_content`` and ``metadata``)."""
    attributes: dict[str, Any] = {}
    for index, document in enumerate(found if isinstance(found, list) else []):
        if not isinstance(document, dict):
            continue
        at = f"retrieval.documents.{index}.document"
        content = document.get("content", document.get("page_content"))
        if content is not None:
            attributes[f"{at}.content"] = text_of(content)
        if document.get("id") is not None:
            attributes[f"{at}.id"] = str(document["id"])
        if isinstance(document.get("score"), int | float):
            attributes[f"{at}.score"] = float(document["score"])
        if document.get("metadata"):
            attributes[f"{at}.metadata"] = dumps(document["metadata"])
    return attributes


def _tool_attributes(call: ToolCall, trace: Trace) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.arguments": dumps(call.arguments),
        "tool.name": call.name,
    }
    # a failed call has no result: "null" would claim it returned one
    if call.result is not None:
        attributes["gen_ai.tool.call.result"] = dumps(call.result)
    if call.error is not None:
        attributes["agenteval.tool_call.error"] = call.error
    if call.id:
        attributes["gen_ai.tool.call.id"] = call.id
        attributes["tool_call.id"] = call.id
    spec = next((tool for tool in trace.tools if tool.name == call.name), None)
    if spec is not None:
        attributes["gen_ai.tool.description"] = spec.description
        attributes["tool.description"] = spec.description
        if spec.parameters is not None:
            attributes["tool.parameters"] = dumps(spec.parameters)
    return attributes


def operation(trace: Trace, index: int) -> str | None:
    """``gen_ai.operation.name`` of the ``index``-th span: the root of a run that holds
    several agents (a crew, a supervisor graph) or no agent at all (a graph, a task) is an
    ``invoke_workflow``; other chains and tasks have none."""
    span = trace.spans[index]
    if index == 0 and (
        span.kind in (SpanKind.CHAIN, SpanKind.TASK)
        or (span.kind is SpanKind.AGENT and any(s.kind is SpanKind.AGENT for s in trace.spans[1:]))
    ):
        return WORKFLOW
    said = span.attributes.get(OPERATION_NAME) if span.kind is SpanKind.LLM else None
    if isinstance(said, str) and said:  # a model call's own: chat, or text_completion
        return said
    return OTEL_OPERATION_NAMES.get(span.kind)


def span_name(trace: Trace, index: int) -> str:
    """``chat {model}``, ``execute_tool {tool}``, ``invoke_agent {agent}``,
    ``invoke_workflow {name}``; other chains keep their own name."""
    span = trace.spans[index]
    op = operation(trace, index)
    if op is None:
        return span.name
    if op == WORKFLOW:
        return f"{op} {span.name}"
    if span.kind is SpanKind.LLM:
        return f"{op} {span.attributes.get(REQUEST_MODEL) or span.name}"
    if span.kind is SpanKind.TOOL and span.tool_call is not None:
        return f"{op} {span.tool_call.name}"
    if span.kind is SpanKind.AGENT:
        return f"{op} {span.attributes.get(AGENT_NAME) or span.name}"
    return f"{op} {span.name}"


def _agent_provider(agent: AgentSpan, trace: Trace) -> str | None:
    """An agent's provider (``invoke_agent`` asks for one): that of its first model call."""
    parents = {span.id: span.parent_id for span in trace.spans}
    for span in trace.spans:
        provider = span.attributes.get(PROVIDER_NAME)
        if span.kind is not SpanKind.LLM or not provider:
            continue
        above = span.parent_id
        while above is not None and above != agent.id:
            above = parents.get(above)
        if above == agent.id:
            return str(provider)
    return None


def span_attributes(span: AgentSpan, trace: Trace, index: int) -> dict[str, Any]:
    """Every attribute the ``index``-th span of the trace carries, in all three vocabularies."""
    root = index == 0
    attributes: dict[str, Any] = {
        "openinference.span.kind": OPENINFERENCE_KINDS[span.kind],
        "agenteval.span.id": span.id,
        # the trace's span order, which start times alone do not fix (ties, clock steps)
        "agenteval.span.index": index,
        "agenteval.span.kind": span.kind.value,
        "agenteval.span.name": span.name,
    }
    op = operation(trace, index)
    if op is not None:
        attributes[OPERATION_NAME] = op
    if trace.session_id:  # on every span, so any of them finds its conversation
        attributes["gen_ai.conversation.id"] = trace.session_id
        attributes["session.id"] = trace.session_id
    if span.parent_id:
        attributes["agenteval.span.parent_id"] = span.parent_id
    # a tool span's input and output are its call's: each encoded once for both vocabularies
    call = span.tool_call
    tool = _tool_attributes(call, trace) if call is not None else {}
    for prefix, value, recorded, name in (
        ("input", span.input, call.arguments if call else None, "gen_ai.tool.call.arguments"),
        ("output", span.output, call.result if call else None, "gen_ai.tool.call.result"),
    ):
        same = call is not None and (value is recorded or value == recorded)
        attributes.update(value_attributes(prefix, value, tool.get(name) if same else None))
    if span.thought is not None:
        attributes["agenteval.thought"] = span.thought
    if span.requested_tool_calls:
        attributes["agenteval.requested_tool_calls"] = dumps(
            [call.model_dump() for call in span.requested_tool_calls]
        )
    if span.kind is SpanKind.AGENT or op == WORKFLOW:
        # a workflow is an agent span with operation invoke_workflow (GenAI conventions
        # v0.1.0 replaced gen_ai.workflow.name with gen_ai.agent.name)
        name = span.attributes.get(AGENT_NAME) or span.name
        attributes[AGENT_NAME] = name
        attributes["agent.name"] = name
        provider = _agent_provider(span, trace)
        if provider:
            attributes[PROVIDER_NAME] = provider
    if span.kind is SpanKind.LLM:
        attributes.update(_llm_attributes(span, trace))
    if span.kind is SpanKind.RETRIEVER:
        attributes.update(_documents(span.output))
    attributes.update(tool)
    if span.error is not None:
        attributes["agenteval.error"] = span.error
        attributes["error.type"] = error_type(span.error)
    if root:
        attributes.update(trace_attributes(trace, span))
        borrowed = []
        for prefix in ("input", "output"):
            value = getattr(trace, prefix)
            if getattr(span, prefix) is None and value is not None:
                attributes.update(value_attributes(prefix, value))
                borrowed.append(prefix)
        if borrowed:
            attributes[FROM_TRACE] = borrowed
    # the span's own attributes last: where a name is shared, the adapter's value stands
    encoded = []
    if span.attributes:
        attributes[OWN] = list(span.attributes)
    for key, value in span.attributes.items():
        if isinstance(value, str | bool | int | float):
            attributes[key] = value
        else:  # None, lists and dicts: OpenTelemetry has no type that keeps them exactly
            attributes[key] = dumps(value)
            encoded.append(key)
    if encoded:
        attributes[ENCODED] = encoded
    return attributes


def trace_attributes(trace: Trace, root: AgentSpan) -> dict[str, Any]:
    """The run itself, on its root span: session, status, alerts, tools, metadata."""
    attributes: dict[str, Any] = {
        "agenteval.trace.id": trace.id,
        "agenteval.trace.schema_version": trace.schema_version,
        "agenteval.trace.tools": dumps([tool.model_dump() for tool in trace.tools]),
    }
    # the root span's input and output are the run's as a rule; say them again only if not
    if trace.input != root.input:
        attributes["agenteval.trace.input"] = dumps(trace.input)
    if trace.output != root.output:
        attributes["agenteval.trace.output"] = dumps(trace.output)
    if trace.metadata:
        attributes["metadata"] = dumps(trace.metadata)
        user = trace.metadata.get("user_id")
        if isinstance(user, str):
            attributes["user.id"] = user
    if trace.framework:
        attributes["agenteval.trace.framework"] = trace.framework
    if trace.error is not None:
        attributes["agenteval.trace.error"] = trace.error
    if trace.status is not None:
        attributes["agenteval.trace.status"] = trace.status.value
    if trace.status_reason is not None:
        attributes["agenteval.trace.status_reason"] = trace.status_reason
    if trace.alerts:
        attributes["agenteval.trace.alerts"] = dumps([alert.model_dump() for alert in trace.alerts])
    for field in ("start_time", "end_time"):
        value = getattr(trace, field)
        if value is not None:
            attributes[f"agenteval.trace.{field}"] = value
    return attributes


def per_call_results(result: MetricResult) -> list[tuple[int, MetricResult]]:
    """(tool-call index, that call's result) for metrics that score each call
    (``metadata["calls"]``, e.g. ``parameter_correctness``): the call's score and verdict,
    with the call's details as the reason."""
    calls = []
    for item in result.metadata.get("calls") or []:
        if isinstance(item, dict) and isinstance(item.get("index"), int):
            score = item.get("score")
            if isinstance(score, int | float):
                detail = {k: v for k, v in item.items() if k not in ("index", "score")}
                update = {
                    "score": float(score),
                    "success": score >= result.threshold,
                    "reason": dumps(detail),
                }
                calls.append((item["index"], result.model_copy(update=update)))
    return calls
