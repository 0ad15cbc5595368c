"""OpenTelemetry spans → agenteval traces.

Three sources, told apart per span:
- agenteval's own export (``agenteval.span.id``): restored exactly;
- OpenInference instrumentors (``openinference.span.kind``): LangChain/LangGraph and
  LlamaIndex wrap values in their framework's objects (graph state, serialised messages,
  tool-call dicts); they are unwrapped to what the model said and the tool saw, as
  agenteval's own adapters record them;
- the GenAI conventions (``gen_ai.operation.name``, ``gen_ai.input.messages``, ...), as
  OpenLLMetry's instrumentors write them, with what they write beside them (its LlamaIndex
  instrumentor's tool calls: ``tool.name``, ``tool.arguments`` and the step's
  ``traceloop.entity.output``).
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any, NamedTuple

from agenteval_core import (
    AGENT_NAME,
    GRAPH_STEP,
    HANDOFF_TARGET,
    INTERNAL_CALL,
    OTEL_OPERATION_NAMES,
    REASONING,
    STEPS_UNRECORDED,
    TOOL_NOT_RUN,
    CaptureError,
    LoopAlert,
    RunStatus,
    Span,
    SpanKind,
    ToolCall,
    ToolSpec,
    Trace,
)
from agenteval_core.recording import (
    CANCELLED_BY_CALLER,
    CLASSIC_STOPS,
    FINISH_REASONS,
    OPERATION_NAME,
    PROVIDER_NAME,
    REQUEST_MODEL,
    RESUME,
    RESUME_QUESTIONS,
    RESUMES_TRACE_ID,
    UNPARSED_REPLY,
    LatestKept,
    TaskSteps,
    limit_or_timeout,
    no_such_tool,
    resume_questions,
    stopped_by_caller,
    unreadable_call,
)

from ._conventions import (
    ENCODED,
    FROM_TRACE,
    INPUT_MESSAGES_LEFT_OUT,
    JSON_MIME,
    OWN,
    OWN_JSON,
    SPANLESS,
    UNREADABLE,
    WORKFLOW,
    from_ns,
)
from ._otlp import SPANS, TRACE_IDS, RawSpan, SpanSource

__all__ = ["import_otlp", "import_otlp_json", "iter_otlp"]

# OpenInference's span kinds, ours among them and the others read as the nearest of ours
FROM_OPENINFERENCE_KIND = {
    "AGENT": SpanKind.AGENT,
    "LLM": SpanKind.LLM,
    "TOOL": SpanKind.TOOL,
    "RETRIEVER": SpanKind.RETRIEVER,
    "CHAIN": SpanKind.CHAIN,
    "EMBEDDING": SpanKind.CHAIN,
    "RERANKER": SpanKind.RETRIEVER,
    "GUARDRAIL": SpanKind.CHAIN,
    "EVALUATOR": SpanKind.CHAIN,
}
# the operation names the export writes, then the others the GenAI conventions define
FROM_GENAI_OPERATION = {
    **{operation: kind for kind, operation in OTEL_OPERATION_NAMES.items()},
    WORKFLOW: SpanKind.CHAIN,
    "create_agent": SpanKind.AGENT,
    "text_completion": SpanKind.LLM,
    "generate_content": SpanKind.LLM,
}
# conventions-named attributes a foreign span keeps as its own
_KEPT = (
    "gen_ai.request.",
    "gen_ai.response.",
    "gen_ai.usage.",
    PROVIDER_NAME,
    "gen_ai.agent.",
    "gen_ai.system",
)
# LangGraph's and LangSmith's keys in a run's metadata, which agenteval's adapter drops too
_BOOKKEEPING = ("langgraph_", "checkpoint_", "ls_", "__")
# the run metadata key LangChain's middleware marks its own model calls with, and the node
# of create_react_agent(response_format=...) that asks for the structured answer after the
# loop: what agenteval's adapter reads too (OpenInference keeps a span's run metadata)
_LANGCHAIN_INTERNAL_CALL = "lc_internal_call"
_STRUCTURED_RESPONSE_NODE = "generate_structured_response"
# and how the nodes of create_agent's middleware hooks end: a model call in one is the
# middleware's, the agent's own run in its "model" node
_MIDDLEWARE_HOOKS = (".before_agent", ".before_model", ".after_model", ".after_agent")
_HUMAN = ("human", "user")
_AI = ("ai", "assistant")
# what OpenLLMetry's LlamaIndex instrumentor writes on the workflow step that runs a tool
# call: the call's arguments, and the step's result (the call, its id and the tool's output)
TOOL_ARGUMENTS = "tool.arguments"
ENTITY_OUTPUT = "traceloop.entity.output"
# and on every span, what the call it records was given (a query engine's: the query)
ENTITY_INPUT = "traceloop.entity.input"
# what OpenLLMetry's LangChain instrumentor writes on a chain's span: its callback's
# inputs and outputs, whole ({"inputs": ..., "tags": ...}, {"outputs": ..., "kwargs": ...})
TASK_INPUT, TASK_OUTPUT = "gen_ai.task.input", "gen_ai.task.output"
# what OpenInference's CrewAI instrumentor writes on a crew's kickoff span
CREW_ID, CREW_INPUTS, CREW_TASKS = "crew_id", "crew_inputs", "crew_tasks"


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _json_list(text: Any) -> list[Any]:
    """A JSON list attribute's items; none when it does not read as one (absent, or cut
    past reading by a length limit)."""
    value = _json(text)
    return value if isinstance(value, list) else []


def _value(attributes: dict[str, Any], prefix: str) -> Any:
    """``input.value`` / ``output.value``: JSON when its MIME type says so (OpenInference and
    our exporter both set it), else text."""
    if f"{prefix}.value" not in attributes:
        return None
    value = attributes[f"{prefix}.value"]
    if attributes.get(f"{prefix}.mime_type") == JSON_MIME:
        return _json(value)
    return value


def _kind(raw: RawSpan) -> SpanKind:
    a = raw.attributes
    if "agenteval.span.kind" in a:
        return SpanKind(a["agenteval.span.kind"])
    kind = FROM_OPENINFERENCE_KIND.get(str(a.get("openinference.span.kind", "")).upper())
    if kind is SpanKind.AGENT and "tool.name" in a:
        return SpanKind.TOOL  # a LangChain tool named "...agent...": OpenInference says agent
    if kind is not None:
        return kind
    if "tool.name" in a and TOOL_ARGUMENTS in a:
        return SpanKind.TOOL  # OpenLLMetry's LlamaIndex: the agent's step that runs a call
    if OPERATION_NAME not in a and "gen_ai.output.messages" in a:
        return SpanKind.LLM  # OpenLLMetry's LlamaIndex completion: no operation named
    operation = a.get(OPERATION_NAME) or raw.name.split(" ")[0]
    return FROM_GENAI_OPERATION.get(operation, SpanKind.CHAIN)


# --- what frameworks wrap values in -----------------------------------------------------


def _role(message: dict[str, Any]) -> str:
    if "role" in message:
        return str(message["role"])
    kind = message.get("type")
    if kind == "constructor":  # LangChain's serialised form: id [..., "HumanMessage"]
        name = str((message.get("id") or [""])[-1])
        return {"HumanMessage": "human", "AIMessage": "ai", "ToolMessage": "tool"}.get(
            name, name.removesuffix("Message").lower()
        )
    return str(kind or "")


def _content(message: Any) -> Any:
    if isinstance(message, dict):
        if message.get("type") == "constructor":
            return _content(message.get("kwargs") or {})
        if "content" in message:
            return _blocks_text(message["content"])
        if isinstance(message.get("parts"), list):  # the GenAI conventions' message
            return _parts_text(message["parts"])
    if isinstance(message, list | tuple) and len(message) == 2 and isinstance(message[0], str):
        return message[1]  # ("human", "text")
    return message


def _blocks_text(content: Any) -> Any:
    """A message's content: its text when it is a list of content blocks (an image beside
    the request's text, an answer in text blocks), as agenteval's adapters take a run's
    request and answer; other content as it is."""
    if (
        isinstance(content, list)
        and content
        and all(
            isinstance(block, str) or (isinstance(block, dict) and "type" in block)
            for block in content
        )
    ):
        return "".join(
            block if isinstance(block, str) else str(block.get("text") or "")
            for block in content
            if isinstance(block, str) or block.get("type") == "text"
        )
    return content


def _parts_text(parts: list[Any]) -> str | None:
    """The text of a GenAI-conventions message's parts (``{"type": "text", "content":
    ...}``), joined; None when it has none (a message of tool calls alone)."""
    texts = [
        str(part.get("content") or "")
        for part in parts
        if isinstance(part, dict) and part.get("type") == "text"
    ]
    return "\n".join(texts) if texts else None


def _messages(value: Any) -> list[Any] | None:
    """The message list inside a graph state ({"messages": [...]}) or a message list."""
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        return list(value["messages"])
    if isinstance(value, list) and value and all(isinstance(m, dict | list) for m in value):
        return value
    return None


def _message_of(message: Any) -> dict[str, Any]:
    if isinstance(message, dict):
        if message.get("type") == "constructor":
            return {**(message.get("kwargs") or {}), "role": _role(message)}
        if isinstance(message.get("data"), dict):  # LangChain's message_to_dict
            return {**message["data"], "role": _role(message)}
        return {**message, "role": _role(message)}
    if isinstance(message, list | tuple) and len(message) == 2:
        return {"role": message[0], "content": message[1]}
    return {"role": "", "content": message}


def _last(value: Any, roles: tuple[str, ...]) -> Any:
    """The content of the last message with one of ``roles`` in a state or message list;
    the value itself when it holds no messages."""
    messages = _messages(value)
    if messages is None:
        return value
    for message in reversed(messages):
        unpacked = _message_of(message)
        if unpacked["role"] in roles:
            return _content(unpacked)
    return value


def _answer(value: Any, last_asked: set[str]) -> Any:
    """A run's answer in its final state: its last AI message's content, or the last
    message's when it is a tool's that the run's last model call asked for (``last_asked``:
    those calls' ids; a tool made with ``return_direct=True`` ends the run with its result,
    as the adapter reads it)."""
    messages = _messages(value)
    if messages:
        last = _message_of(messages[-1])
        if last["role"] == "tool" and last.get("tool_call_id") in last_asked:
            return _content(last)
    return _last(value, _AI)


def _unwrap_text(value: Any) -> Any:
    """A single-key dict around a string ({"input": "..."} or {"output": "..."}), as chains
    return, is that string."""
    if isinstance(value, dict) and len(value) == 1:
        only = next(iter(value.values()))
        if isinstance(only, str):
            return only
    return value


def _tool_arguments(value: Any) -> tuple[dict[str, Any], str | None, bool]:
    """Tool input as the tool saw it, its call id if it says, and whether the arguments are
    exact: a LangChain tool-call dict ({"name", "args", "id"}), LlamaIndex's
    ``{"kwargs": ...}``, JSON, a Python repr of a dict; a bare string (LangChain passes the
    only argument's value) is not exact and is replaced by the call the model asked for."""
    if isinstance(value, str):
        parsed = _json(value)
        if isinstance(parsed, str) and value.lstrip().startswith("{"):
            try:  # a Python dict's repr ({'city': 'Paris'}); literals only, never code
                parsed = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                parsed = value
        value = parsed
    if isinstance(value, dict) and isinstance(value.get("args"), dict):
        return dict(value["args"]), value.get("id"), True
    if isinstance(value, dict) and "input_str" in value:
        # LangChain's tool-start callback written whole (OpenLLMetry's
        # gen_ai.tool.call.arguments): the arguments are its inputs, the call id is among its
        # keyword arguments (the others, a colour and tags, are the callback's own)
        extra = value.get("kwargs")
        extra = extra if isinstance(extra, dict) else {}
        given = value.get("inputs")
        arguments, call_id, exact = (
            (dict(given), None, True)
            if isinstance(given, dict)
            else _tool_arguments(value["input_str"])
        )
        return arguments, extra.get("tool_call_id") or call_id, exact
    if isinstance(value, dict) and isinstance(value.get("kwargs"), dict):
        # an object the framework passed in (LlamaIndex's Context for a tool that takes
        # one), written as its repr: no argument of the call the model asked for
        kwargs = value["kwargs"]
        return {k: v for k, v in kwargs.items() if not _object_repr(v)}, None, True
    if isinstance(value, dict):
        return value, None, True
    return ({"input": value} if value is not None else {}), None, False


_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")


def _object_repr(value: Any) -> bool:
    """Whether ``value`` is only an object's default repr (its class and address)."""
    return isinstance(value, str) and _OBJECT_REPR.fullmatch(value) is not None


def _tool_result(value: Any, call_id: str | None = None) -> tuple[Any, str | None]:
    """Tool output as the tool returned it: a serialised ToolMessage's content (and its
    ``tool_call_id``), of a LangGraph ``Command`` the tool message in its update that
    answers call ``call_id`` (else its only one), LlamaIndex's ``raw_output`` (of its step
    that ran the call too, with the call's id), or the value."""
    if _command(value) is not None:  # what the model is shown is its tool message
        update = value["update"]
        messages = update.get("messages") if isinstance(update, dict) else None
        replies = [
            message
            for message in map(_message_of, _listed(messages))
            if "tool_call_id" in message and "content" in message
        ]
        answering = [m for m in replies if m["tool_call_id"] == call_id] or (
            replies if len(replies) == 1 else []
        )
        if answering:
            return answering[-1]["content"], answering[-1]["tool_call_id"]
        return value, None
    if isinstance(value, dict):
        if isinstance(value.get("tool_output"), dict) and "tool_id" in value:
            return _tool_result(value["tool_output"])[0], value["tool_id"]
        if "raw_output" in value and "tool_name" in value:
            return value["raw_output"], None
        if set(value) == {"output", "kwargs"}:  # LangChain's tool-end callback, whole
            return _tool_result(value["output"])
        message = _message_of(value)
        if "tool_call_id" in message and "content" in message:
            return message["content"], message.get("tool_call_id")
    return value, None


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [] if value is None else [value]


def _handoff(value: Any) -> dict[str, Any]:
    """Where a tool's LangGraph ``Command`` sends the graph next (a handoff), as span
    attributes, as the LangChain adapter records it."""
    command = _command(value)
    goto = command["goto"] if command is not None else None
    return {HANDOFF_TARGET: goto} if goto else {}


def _failed_output(value: Any) -> str | None:
    """The error of a LlamaIndex tool call that failed, from its step's result: the agent
    catches what the tool raised and hands the model its text as an output marked
    ``is_error`` (the span itself does not fail)."""
    output = value.get("tool_output") if isinstance(value, dict) else None
    if isinstance(output, dict) and output.get("is_error") is True:
        return str(output.get("raw_output") or "tool error")
    return None


# --- spans --------------------------------------------------------------------------------


def _readable(a: dict[str, Any], key: str) -> Any:
    """One of the attributes :data:`OWN_JSON` names, read; ``None`` when absent or cut past
    reading (:func:`_unreadable`)."""
    value = _json(a.get(key))
    return value if isinstance(value, OWN_JSON[key]) else None


def _unreadable(a: dict[str, Any]) -> list[str]:
    """The attributes :data:`OWN_JSON` names that a span holds and that do not read as the
    JSON they hold: cut as text past a length limit (by our exporter, which marks the cut,
    or by a collector)."""
    return [key for key in OWN_JSON if key in a and _readable(a, key) is None]


def _requested_calls(a: dict[str, Any]) -> list[ToolCall]:
    asked = _readable(a, "agenteval.requested_tool_calls")
    if asked is not None:
        return [ToolCall.model_validate(c) for c in asked]
    calls: dict[tuple[int, int], dict[str, Any]] = defaultdict(dict)
    prefix = "llm.output_messages."
    for key, value in a.items():
        if key.startswith(prefix) and ".message.tool_calls." in key:
            message, _, rest = key[len(prefix) :].partition(".message.tool_calls.")
            index, _, field = rest.partition(".")
            calls[(int(message), int(index))][field] = value
    if calls:
        return [
            ToolCall(
                id=fields.get("tool_call.id"),
                name=fields.get("tool_call.function.name", "tool"),
                arguments=_tool_arguments(fields.get("tool_call.function.arguments", "{}"))[0],
            )
            for _, fields in sorted(calls.items())
        ]
    for message in _json_list(a.get("gen_ai.output.messages")):
        parts = message.get("parts") if isinstance(message, dict) else None
        return [
            ToolCall(id=p.get("id"), name=p.get("name", "tool"), arguments=p.get("arguments") or {})
            for p in (parts if isinstance(parts, list) else ())
            if isinstance(p, dict) and p.get("type") == "tool_call"
        ]
    return []


def _openinference_messages(a: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Messages from OpenInference's ``PREFIX.N.message.*``: role and content, the content a
    list of text and image blocks (OpenAI's form) when the message gives its ``contents``
    (what the instrumentors write for a message of content blocks, an image's included)."""
    messages: dict[int, dict[str, Any]] = defaultdict(dict)
    contents: dict[int, dict[int, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
    for key, value in a.items():
        if key.startswith(prefix) and ".message." in key and ".tool_calls." not in key:
            index, _, field = key[len(prefix) :].partition(".message.")
            if field in ("role", "content"):
                messages[int(index)][field] = value
            elif field.startswith("contents."):
                number, _, name = field.removeprefix("contents.").partition(".message_content.")
                if number.isdigit() and name in ("type", "text", "image.image.url"):
                    contents[int(index)][int(number)][name] = value
    for at, parts in contents.items():
        if "content" not in messages[at]:
            messages[at]["content"] = [_block(parts[n]) for n in sorted(parts)]
    first = _first_whole_message(a, prefix)
    return [messages[i] for i in sorted(messages) if i >= first]


def _first_whole_message(a: dict[str, Any], prefix: str) -> int:
    """The index of the first of OpenInference's ``PREFIX.N.message.*`` with its role: 0,
    unless the SDK dropped the earliest past its attribute limit (the oldest set go
    first, a message's role before its content)."""
    return min(
        (
            int(number)
            for key in a
            if key.startswith(prefix) and key.endswith(".message.role")
            for number in [key[len(prefix) :].partition(".")[0]]
            if number.isdigit()
        ),
        default=0,
    )


def _block(part: dict[str, Any]) -> dict[str, Any]:
    """One of OpenInference's ``message_content`` entries as a content block."""
    if part.get("type") == "image" or "image.image.url" in part:
        return {"type": "image_url", "image_url": {"url": part.get("image.image.url")}}
    return {"type": "text", "text": part.get("text", "")}


def _llm_io(a: dict[str, Any], inputs: Any, output: Any) -> tuple[Any, Any]:
    """An LLM span's input as the messages sent (a completion's: its prompt) and its output
    as the text answered."""
    sent = _openinference_messages(a, "llm.input_messages.")
    prompts = a.get("llm.prompts")
    if sent:
        inputs = sent
    elif "gen_ai.input.messages" in a:
        inputs = _json(a["gen_ai.input.messages"])
    elif isinstance(prompts, list | tuple) and prompts:
        inputs = prompts[0] if len(prompts) == 1 else list(prompts)
    answered = _openinference_messages(a, "llm.output_messages.")
    if answered:
        output = "\n".join(str(m["content"]) for m in answered if m.get("content"))
    elif "gen_ai.output.messages" in a:
        output = _genai_answer(a)
    return inputs, output


def _genai_answer(a: dict[str, Any]) -> str | None:
    """The text of the messages a span's ``gen_ai.output.messages`` holds, joined."""
    texts = [
        text
        for message in _json_list(a["gen_ai.output.messages"])
        if isinstance(message, dict) and isinstance(message.get("parts"), list)
        for text in [_parts_text(message["parts"])]
        if text
    ]
    return "\n".join(texts) or None


def _documents(a: dict[str, Any]) -> list[dict[str, Any]]:
    """A retrieval's documents from OpenInference's ``retrieval.documents.*``, in the form
    agenteval's LlamaIndex adapter records them: each one's ``id``, ``content`` and
    ``score`` (and ``metadata``), those it gives."""
    found: dict[int, dict[str, Any]] = defaultdict(dict)
    for key, value in a.items():
        if key.startswith("retrieval.documents."):
            index, _, field = key[len("retrieval.documents.") :].partition(".document.")
            if index.isdigit() and field in ("id", "content", "score", "metadata"):
                found[int(index)][field] = _json(value) if field == "metadata" else value
    return [found[index] for index in sorted(found)]


def _tools(a: dict[str, Any]) -> list[ToolSpec]:
    """Tool definitions an LLM span was given (``llm.tools.*``, ``gen_ai.tool.definitions``),
    or the one a tool span describes (``tool.name``, ``tool.description``,
    ``tool.parameters``)."""
    if a.get("tool.name") and "tool.parameters" in a:
        parameters = _json(a["tool.parameters"])
        return [
            ToolSpec(
                name=a["tool.name"],
                description=a.get("tool.description") or "",
                parameters=parameters if isinstance(parameters, dict) else None,
            )
        ]
    definitions: list[Any] = [
        _json(a[key])
        for key in sorted(
            (k for k in a if k.startswith("llm.tools.") and k.endswith(".tool.json_schema")),
            key=lambda k: int(k.split(".")[2]),
        )
    ]
    definitions.extend(_json_list(a.get("gen_ai.tool.definitions")))
    tools = []
    for definition in definitions:
        if not isinstance(definition, dict):
            continue
        function = definition.get("function") if "function" in definition else definition
        if isinstance(function, dict) and function.get("name"):
            tools.append(
                ToolSpec(
                    name=function["name"],
                    description=function.get("description") or "",
                    parameters=function.get("parameters"),
                )
            )
    return tools


def _own_attributes(a: dict[str, Any]) -> dict[str, Any]:
    encoded = set(a.get(ENCODED) or ())
    return {key: _json(a[key]) if key in encoded else a[key] for key in a.get(OWN) or ()}


def _foreign_attributes(a: dict[str, Any], kind: SpanKind) -> dict[str, Any]:
    kept = {key: value for key, value in a.items() if key.startswith(_KEPT)}
    if kind is SpanKind.LLM:
        model = a.get(REQUEST_MODEL) or a.get("llm.model_name")
        if model:
            kept[REQUEST_MODEL] = model
        provider = a.get(PROVIDER_NAME) or a.get("llm.provider")
        if provider:
            kept[PROVIDER_NAME] = provider
        for ours, theirs in (
            ("input_tokens", "llm.token_count.prompt"),
            ("output_tokens", "llm.token_count.completion"),
        ):
            if theirs in a and f"gen_ai.usage.{ours}" not in kept:
                kept[f"gen_ai.usage.{ours}"] = a[theirs]
        if FINISH_REASONS not in kept and a.get("llm.finish_reason"):  # OpenInference's one
            kept[FINISH_REASONS] = [a["llm.finish_reason"]]
        # past its attribute limit the SDK drops the oldest set: a long conversation's
        # first messages (and its input.value); the span says how many are unknown
        first = _first_whole_message(a, "llm.input_messages.")
        if first:
            kept[INPUT_MESSAGES_LEFT_OUT] = first
        reasoning = [
            str(part.get("content") or "")
            for message in _json_list(a.get("gen_ai.output.messages"))
            if isinstance(message, dict)
            for part in message.get("parts") or []
            if isinstance(part, dict) and part.get("type") == "reasoning"
        ]
        if any(reasoning):  # the conventions' reasoning part
            kept[REASONING] = "\n\n".join(text for text in reasoning if text)
    if kind is SpanKind.AGENT and (a.get("agent.name") or a.get(AGENT_NAME)):
        kept[AGENT_NAME] = a.get(AGENT_NAME) or a["agent.name"]
    if _internal_call(a):
        kept[INTERNAL_CALL] = True
    return kept


def _internal_call(a: dict[str, Any]) -> bool:
    """Whether a foreign span is a call a LangChain middleware made for its own ends (a
    summary of the history, a choice of tools, a check in one of its hooks): no step of
    the agent."""
    metadata = a.get("metadata")
    if not isinstance(metadata, str) or not any(
        mark in metadata
        for mark in (_LANGCHAIN_INTERNAL_CALL, _STRUCTURED_RESPONSE_NODE, *_MIDDLEWARE_HOOKS)
    ):
        return False  # most spans: no JSON parsed
    parsed = _json(metadata)
    if not isinstance(parsed, dict):
        return False
    node = parsed.get("langgraph_node")
    return (
        _LANGCHAIN_INTERNAL_CALL in parsed
        or node == _STRUCTURED_RESPONSE_NODE
        or (isinstance(node, str) and node.endswith(_MIDDLEWARE_HOOKS))
    )


def _error(raw: RawSpan) -> str | None:
    a = raw.attributes
    if "agenteval.error" in a:
        return str(a["agenteval.error"])
    if not raw.error:
        return None
    for name, event in raw.events:
        if name == "exception" and event.get("exception.message"):
            kind = event.get("exception.type")
            return f"{kind}: {event['exception.message']}" if kind else event["exception.message"]
    return raw.status_message or a.get("error.type") or "error"


def _raised(raw: RawSpan) -> tuple[str, str] | None:
    """The class name and message of the exception a failed span records, if it does."""
    if not raw.error:
        return None
    for name, event in raw.events:
        if name == "exception" and event.get("exception.type"):
            return str(event["exception.type"]), str(event.get("exception.message", ""))
    return None


def _span(raw: RawSpan, guessed: set[str]) -> Span:
    """One span; the ids of tool spans whose arguments are a guess go into ``guessed``."""
    a = raw.attributes
    ours = "agenteval.span.id" in a
    kind = _kind(raw)
    inputs, output = _value(a, "input"), _value(a, "output")
    error = _error(raw)
    tool_call = None
    if ours:
        borrowed = a.get(FROM_TRACE) or ()  # the run's, shown on a root that had none
        inputs = None if "input" in borrowed else inputs
        output = None if "output" in borrowed else output
        name = a.get("agenteval.span.name", raw.name)
        attributes = _own_attributes(a)
        lost = _unreadable(a)
        if lost:
            attributes[UNREADABLE] = lost
        if "gen_ai.tool.name" in a and kind is SpanKind.TOOL:
            tool_call = ToolCall(
                id=a.get("gen_ai.tool.call.id"),
                name=a["gen_ai.tool.name"],
                arguments=_readable(a, "gen_ai.tool.call.arguments") or {},
                result=_json(a["gen_ai.tool.call.result"])
                if "gen_ai.tool.call.result" in a
                else None,
                error=a.get("agenteval.tool_call.error"),
            )
    else:
        name = a.get("gen_ai.tool.name") or a.get("tool.name") or a.get("agent.name")
        name = name or a.get(AGENT_NAME) or raw.name
        decision = False
        if (
            kind is SpanKind.LLM
            and "llm.prompts" not in a
            and not any(
                key.startswith(
                    (
                        "llm.input_messages.",
                        "llm.output_messages.",
                        "gen_ai.input.",
                        "gen_ai.output.",
                    )
                )
                for key in a
            )
        ):
            # LlamaIndex's tool preparation, an LLM's predict around its chat or complete:
            # the model call is the span inside, if any. A LangChain run of this kind (run
            # metadata, no messages) is a decision model's (langchain_core.decisions, run
            # type "llm": a middleware's classifier): the calls inside it are its own
            kind = SpanKind.CHAIN
            decision = isinstance(_json(a.get("metadata")), dict)
        attributes = _foreign_attributes(a, kind)
        if decision:
            attributes[INTERNAL_CALL] = True
        if kind is SpanKind.LLM:
            inputs, output = _llm_io(a, inputs, output)
        elif kind is SpanKind.RETRIEVER:
            output = _documents(a) or output
        if kind is SpanKind.TOOL and name == UNPARSED_REPLY:
            kind, name = SpanKind.CHAIN, "unparsed reply"  # the model's reply did not parse
        elif kind is SpanKind.TOOL:
            if inputs is None and output is None:  # OpenLLMetry's LlamaIndex step
                inputs, output = a.get(TOOL_ARGUMENTS), _json(a.get(ENTITY_OUTPUT))
                error = error or _failed_output(output)
            arguments, call_id, exact = _tool_arguments(a.get("gen_ai.tool.call.arguments", inputs))
            returned = (
                _json(a["gen_ai.tool.call.result"]) if "gen_ai.tool.call.result" in a else output
            )
            own_id = a.get("gen_ai.tool.call.id") or a.get("tool_call.id") or call_id
            result, result_id = _tool_result(returned, own_id)
            attributes |= _handoff(returned)
            inputs, output = arguments, result
            tool_call = ToolCall(
                id=own_id or result_id,
                name=str(name),
                arguments=arguments,
                result=None if error else result,
                error=error,
            )
            if not exact:
                guessed.add(raw.span_id)
    return Span(
        id=a.get("agenteval.span.id") or raw.span_id,
        parent_id=a.get("agenteval.span.parent_id") or None,
        kind=kind,
        name=str(name),
        input=inputs,
        output=output,
        error=error,
        start_time=from_ns(raw.start_ns) if raw.start_ns is not None else None,
        end_time=from_ns(raw.end_ns) if raw.end_ns is not None else None,
        attributes=attributes,
        thought=a.get("agenteval.thought"),
        tool_call=tool_call,
        requested_tool_calls=_requested_calls(a) if kind is SpanKind.LLM else [],
    )


def _graph_agents(raws: list[RawSpan], spans: list[Span]) -> None:
    """LangGraph's agents as the LangChain adapter records them, where OpenInference calls
    any run an agent whose name holds "agent" (a node ``agent``, a middleware's
    ``before_agent`` hook, a subgraph's node around it): a graph run below the root is an
    agent span when it has a name of its own (``create_agent(name=...)``, a supervisor's
    worker) or a tool runs it (a sub-agent, a deep agent's ``task``), given the request its
    input ends with and answering its last AI message, its name (unless LangGraph's
    default) on every span below it; any other LangGraph run is no agent. A task's own run
    (a node's) says its step (:data:`GRAPH_STEP`), as the adapter records it."""
    by_id = {span.id: span for span in spans}
    tasks = {span.id: _graph_task(raw) for raw, span in zip(raws, spans, strict=True)}
    depth = {key: len(task.namespace.split("|")) if task else None for key, task in tasks.items()}
    called = TaskSteps()
    raw_of = {span.id: raw.attributes for raw, span in zip(raws, spans, strict=True)}
    runs_graph = {  # a child one graph further down: the run is a graph's
        span.parent_id
        for span in spans
        if span.parent_id is not None
        and (own := depth[span.id]) is not None
        and own > (depth.get(span.parent_id) or 0)
    }
    named: dict[str, str] = {}  # the spans of a named agent, to its name
    for span in spans[1:]:  # a parent before its children; the root is the run's agent
        parent = by_id.get(span.parent_id) if span.parent_id is not None else None
        langgraph = depth[span.id] is not None  # a span of no LangGraph run keeps its kind
        if (
            langgraph
            and span.id in runs_graph
            and span.kind is not SpanKind.TOOL
            and (
                span.name != _UNNAMED_GRAPH or (parent is not None and parent.kind is SpanKind.TOOL)
            )
        ):
            span.kind = SpanKind.AGENT
            span.input = _last(span.input, ("human", "user"))
            span.output = _last(span.output, ("ai", "assistant"))
            if span.name != _UNNAMED_GRAPH:
                named[span.id] = span.name
        elif langgraph and span.kind is SpanKind.AGENT:
            span.kind = SpanKind.CHAIN
        if span.id not in named and span.parent_id in named:
            named[span.id] = named[span.parent_id]
        if span.id in named:
            span.attributes[AGENT_NAME] = named[span.id]
        task = tasks[span.id]
        above = tasks.get(span.parent_id) if span.parent_id is not None else None
        if task is None or (above is not None and above.namespace == task.namespace):
            continue  # not a task's own run (its parent is in the task)
        if task.called and span.parent_id is not None:
            # OpenLLMetry writes a task's inputs beside its callback's other arguments
            given = span.input if span.input is not None else _chain_io(raw_of[span.id])[0]
            span.attributes[GRAPH_STEP] = called.step(span.parent_id, span.name, given, span.id)
            if span.error is not None:  # a retry policy may run it again: at its step
                called.ended(span.id, raised=True)
        elif task.step is not None:
            span.attributes[GRAPH_STEP] = task.step


def _chain_io(a: dict[str, Any]) -> tuple[Any, Any]:
    """What OpenLLMetry's LangChain instrumentor says a chain was given and returned (its
    callback's inputs and outputs), each None when it says nothing."""
    given, ended = _json(a.get(TASK_INPUT)), _json(a.get(TASK_OUTPUT))
    return (
        given["inputs"] if isinstance(given, dict) and "inputs" in given else None,
        ended["outputs"] if isinstance(ended, dict) and "outputs" in ended else None,
    )


def _traceloop_graph_agents(raws: list[RawSpan], spans: list[Span]) -> None:
    """OpenLLMetry's LangGraph agents as the LangChain adapter records them. Its LangChain
    instrumentor writes a named graph's run (``create_agent(name=...)``, a supervisor's
    worker) as a task span of that name beside an empty ``invoke_agent`` span naming the
    agent, and a ``Command``'s ``goto`` as an empty span under the span that returned it
    (a handoff tool, the tool node). The task is the agent span, given the request its
    input ends with and answering its last AI message, with the agent's name on every span
    below it; the tool and node that sent the run on hold the target
    (:data:`HANDOFF_TARGET`); the empty spans go."""
    children: defaultdict[str | None, list[int]] = defaultdict(list)
    for index, span in enumerate(spans):
        children[span.parent_id].append(index)
    dropped: set[int] = set()
    named: dict[str, str] = {}  # an agent's spans, to its name
    by_id = {span.id: span for span in spans}
    for index, (raw, span) in enumerate(zip(raws, spans, strict=True)):
        a = raw.attributes
        if index == 0 or children[span.id]:
            continue
        goto = a.get(_GOTO_NODE)
        if goto is not None and span.parent_id in by_id:
            by_id[span.parent_id].attributes[HANDOFF_TARGET] = goto
            dropped.add(index)
            continue
        name = a.get(AGENT_NAME)
        if a.get(OPERATION_NAME) != "invoke_agent" or not isinstance(name, str):
            continue
        task = next(
            (
                other
                for other in children[span.parent_id]
                if raws[other].attributes.get(_ENTITY_NAME) == name
                and raws[other].attributes.get(_TRACELOOP_KIND) == "task"
            ),
            None,
        )
        if task is None:
            continue
        agent, (given, ended) = spans[task], _chain_io(raws[task].attributes)
        agent.kind, agent.name = SpanKind.AGENT, name
        agent.input = _last(given if agent.input is None else agent.input, _HUMAN)
        agent.output = _last(ended if agent.output is None else agent.output, _AI)
        named[agent.id] = name
        dropped.add(index)
    if not dropped:
        return
    for index, span in enumerate(spans):  # a parent before its children
        if span.id not in named and span.parent_id in named:
            named[span.id] = named[span.parent_id]
        if span.id in named and index not in dropped:
            span.attributes[AGENT_NAME] = named[span.id]
    raws[:] = [raw for index, raw in enumerate(raws) if index not in dropped]
    spans[:] = [span for index, span in enumerate(spans) if index not in dropped]


_GOTO_NODE = "langgraph.command.goto_node"
_ENTITY_NAME = "traceloop.entity.name"
_TRACELOOP_KIND = "traceloop.span.kind"


_TRACELOOP_METADATA = "traceloop.association.properties."
"""OpenLLMetry writes a LangChain run's metadata as attributes, each key after this."""


class _GraphTask(NamedTuple):
    """The LangGraph task a run is in."""

    namespace: str
    """Its ``langgraph_checkpoint_ns``: one part a graph deep."""
    step: int | None
    called: bool
    """Whether the functional API called it (an ``@task`` an ``@entrypoint`` called), whose
    step LangGraph leaves its caller's: :class:`TaskSteps` gives it one, as the adapter."""


def _graph_task(raw: RawSpan) -> _GraphTask | None:
    """The LangGraph task a run is in, from the run's metadata (OpenInference's JSON,
    OpenLLMetry's attributes); None for a span of no LangGraph run."""
    a = raw.attributes
    namespace = a.get(_TRACELOOP_METADATA + "langgraph_checkpoint_ns")
    if namespace is not None:
        step = a.get(_TRACELOOP_METADATA + "langgraph_step")
        path = a.get(_TRACELOOP_METADATA + "langgraph_path")
    else:
        metadata = a.get("metadata")
        if not isinstance(metadata, str) or "langgraph_checkpoint_ns" not in metadata:
            return None  # most spans: no JSON parsed
        parsed = _json(metadata)
        if not isinstance(parsed, dict):
            return None
        namespace, step = parsed.get("langgraph_checkpoint_ns"), parsed.get("langgraph_step")
        path = parsed.get("langgraph_path")
    if not isinstance(namespace, str) or not namespace:
        return None
    step = step if isinstance(step, int) and not isinstance(step, bool) else None
    return _GraphTask(namespace, step, _called_task(path))


def _called_task(path: Any) -> bool:
    """Whether a run's ``langgraph_path`` is a task the functional API called: pushed, and
    called (``("__pregel_push", <caller's path>, <index>, True)``; OpenLLMetry writes each
    part as text and leaves the caller's out), not a ``Send``'s (``(..., False)``)."""
    if isinstance(path, str):
        path = _literal(path)
    if not isinstance(path, list | tuple) or len(path) < 3:
        return False
    return path[0] == "__pregel_push" and path[-1] in (True, "True")


def _link_calls(spans: list[Span], guessed: set[str]) -> None:
    """Each executed call is matched to the call the model asked for (same id, else same
    arguments, else, for a call whose arguments are a guess from a bare value, the one whose
    only argument has that value, else the first unclaimed one with that name): it takes
    the model's call id when it has none, and the model's arguments when its own were a
    guess. Calls run concurrently (a functional-API agent's tasks) end in any order. A run
    that finds its request taken, with no model call since, is the same call run again (a
    retry middleware after the tool raised): it takes that call's id."""
    asked: dict[str, list[ToolCall]] = defaultdict(list)
    taken: dict[str, ToolCall] = {}  # a tool's name → the request its last run took
    for span in spans:
        if span.kind is SpanKind.LLM:
            taken = {}
        for call in span.requested_tool_calls:
            asked[call.name].append(call)
        if span.tool_call is None:
            continue
        waiting = asked.get(span.tool_call.name) or []
        bare = [span.tool_call.arguments.get("input")] if span.id in guessed else None
        match = next((c for c in waiting if c.id and c.id == span.tool_call.id), None)
        match = match or next((c for c in waiting if c.arguments == span.tool_call.arguments), None)
        if match is None and bare is not None:  # LangChain passed the only argument's value
            match = next((c for c in waiting if list(c.arguments.values()) == bare), None)
        match = match or (waiting[0] if waiting else None)
        if match is not None:
            waiting.remove(match)
            taken[match.name] = match
        elif (again := taken.get(span.tool_call.name)) is not None and (
            again.arguments == span.tool_call.arguments or list(again.arguments.values()) == bare
        ):
            match = again
        else:
            continue
        if not span.tool_call.id:
            span.tool_call.id = match.id
        if span.id in guessed:
            span.tool_call.arguments = dict(match.arguments)
            span.input = dict(match.arguments)
            guessed.discard(span.id)


def _name_bare_values(spans: list[Span], guessed: set[str], tools: dict[str, ToolSpec]) -> None:
    """A call still holding the bare value LangChain passed (``{"input": value}``: no model
    call of its trace asked for it, as in a run resumed after a pause, whose request is the
    paused run's) takes its tool's one parameter's name, when the tool's schema has one."""
    for span in spans:
        call = span.tool_call
        if call is None or span.id not in guessed or list(call.arguments) != ["input"]:
            continue
        spec = tools.get(call.name)
        named = (spec.parameters or {}).get("properties") if spec is not None else None
        if isinstance(named, dict) and len(named) == 1:
            call.arguments = {next(iter(named)): call.arguments["input"]}
            span.input = dict(call.arguments)


def _tool_replies(a: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The tool messages a model call was shown (OpenInference's ``llm.input_messages``):
    each one's call id, text, and whether it said an error (the status LangChain keeps in
    the call's serialised input)."""
    replies: list[tuple[str, str, bool]] = []
    for index in itertools.count():
        prefix = f"llm.input_messages.{index}.message."
        if prefix + "role" not in a:
            break
        call_id = a.get(prefix + "tool_call_id")
        if a[prefix + "role"] == "tool" and call_id:
            replies.append((str(call_id), str(a.get(prefix + "content") or ""), False))
    if not replies:
        return replies
    failed = {
        kwargs.get("tool_call_id")
        for message in _messages(_first_list(_json(a.get("input.value")))) or []
        if isinstance(message, dict)
        for kwargs in [message.get("kwargs") or {}]
        if isinstance(kwargs, dict) and kwargs.get("status") == "error"
    }
    return [(call_id, text, call_id in failed) for call_id, text, _ in replies]


def _first_list(value: Any) -> Any:
    """A chat model's input as OpenInference keeps it: ``{"messages": [[...]]}``, one list
    of messages per prompt; the first prompt's."""
    messages = value.get("messages") if isinstance(value, dict) else None
    if isinstance(messages, list) and messages and isinstance(messages[0], list):
        return messages[0]
    return value


def _unreadable_in(a: dict[str, Any]) -> list[ToolCall]:
    """The calls a LangChain model asked for whose arguments could not be read, from the
    reply OpenInference keeps whole (``output.value``: its ``invalid_tool_calls``)."""
    result = _json(a.get("output.value"))
    generations = result.get("generations") if isinstance(result, dict) else None
    try:
        kwargs = generations[0][0]["message"]["kwargs"]  # type: ignore[index]
        return [unreadable_call(asked) for asked in kwargs.get("invalid_tool_calls") or ()]
    except (TypeError, LookupError, AttributeError):
        return []


def _unrun_calls(raws: list[RawSpan], spans: list[Span]) -> None:
    """A tool span for each call a model asked for that no tool ran, answered in a later
    model call's input instead (LangChain's tool node answering a call of a tool the agent
    does not have, a middleware refusing one), placed before that model call, as
    agenteval's adapter records it: the text the model was shown is its result, and its
    error when it said one. A call that raised has no result of its own: the text the model
    was shown in its place (the error an agent's code handled) is its result, as the adapter
    records it. A call whose arguments could not be read (:func:`_unreadable_in`) is a
    failed call in a tool span inside its model call, as the adapter records it too."""
    ran = {span.tool_call.id: span for span in spans if span.tool_call is not None}
    asked: dict[str, ToolCall] = {}
    placed: list[Span] = []
    for raw, span in zip(raws, spans, strict=True):
        unreadable = _unreadable_in(raw.attributes) if span.kind is SpanKind.LLM else []
        span.requested_tool_calls += unreadable
        tools_inside = [
            Span(
                id=f"{span.id}-unreadable-{index}",
                parent_id=span.id,
                kind=SpanKind.TOOL,
                name=call.name,
                error=call.error,
                start_time=span.end_time,
                end_time=span.end_time,
                tool_call=call,
            )
            for index, call in enumerate(unreadable)
        ]
        if span.kind is SpanKind.LLM:
            for call_id, text, failed in _tool_replies(raw.attributes):
                done = ran.get(call_id)
                if done is not None:
                    if done.error and done.output is None and done.tool_call is not None:
                        done.output = done.tool_call.result = text
                    continue
                request = asked.get(call_id)
                if request is None:
                    continue
                error = text if failed or no_such_tool(request.name, text) else None
                ran[call_id] = unrun = Span(
                    id=f"{span.id}-{call_id}",
                    parent_id=span.parent_id,
                    kind=SpanKind.TOOL,
                    name=request.name,
                    input=dict(request.arguments),
                    output=text,
                    error=error,
                    start_time=span.start_time,
                    end_time=span.start_time,
                    attributes={TOOL_NOT_RUN: True},
                    tool_call=ToolCall(
                        id=call_id,
                        name=request.name,
                        arguments=dict(request.arguments),
                        result=text,
                        error=error,
                    ),
                )
                placed.append(unrun)
            asked.update((call.id, call) for call in span.requested_tool_calls if call.id)
        placed.append(span)
        placed += tools_inside
    spans[:] = placed


def _text(value: Any) -> str | None:
    """Plain text a person wrote or read, not a framework object's repr
    (``StopEvent(result=...)``) or a structure."""
    if isinstance(value, str) and not re.match(r"^[A-Z]\w*\(", value):
        return value
    return None


def _conversation(root: Span, spans: list[Span], raws: list[RawSpan]) -> tuple[Any, Any]:
    """The run's input and output as agenteval's adapters record them: the user's message
    and the final answer, from the root's graph state or messages when it holds them, else
    from the first and last model calls when the root holds framework objects or no input
    (a run from a checkpoint, ``invoke(None, config)``); a run that returned nothing keeps
    ``None`` as its output. A root that records no answer at all (the GenAI conventions,
    as OpenLLMetry writes them) answers with its output messages, else (OpenLLMetry's
    LlamaIndex agents) the result of the workflow step that ended it, else its last model
    call's text; OpenLLMetry's CrewAI run, which holds no messages, with the crew's
    attributes (its first task's description and its result)."""
    a = raws[0].attributes
    llms = [span for span in spans if span.kind is SpanKind.LLM]
    # OpenInference writes a run given no input (one from a checkpoint) as the text "null"
    given = None if root.input == "null" else root.input
    query = _query_text(_json(a.get(ENTITY_INPUT))) if given is None else None
    if isinstance(query, str) and root.output is None:
        # OpenLLMetry's LlamaIndex query: what it was asked, and its Response (an index
        # being built, given nodes or texts, is no query)
        return query, _query_text(_json(a.get(ENTITY_OUTPUT)))
    if CREW_INPUTS in a:  # OpenInference's CrewAI kickoff: its inputs, the session key too
        given = None
    chain_input, chain_output = _chain_io(a)
    given = chain_input if given is None else given
    ended = chain_output if root.output is None else root.output
    if isinstance(given, dict) and "init_state" in given:
        # a LlamaIndex workflow's run: its bookkeeping (the broker's state, a start event's
        # repr without the fields it was run with), no request
        given = None
    inputs = _unwrap_text(_last(given, _HUMAN))
    if _text(inputs) is None and llms:  # no input, or no text in it
        inputs = _last(llms[0].input, _HUMAN)
    if inputs is None and "crewai.crew.id" in a:
        inputs = _crew_request(raws)
    if inputs is None and CREW_ID in a:
        inputs = _kickoff_request(a)
    asked = {call.id for call in llms[-1].requested_tool_calls if call.id} if llms else set()
    output = _stop_result(_unwrap_text(_answer(ended, asked)))
    if CREW_ID in a and isinstance(output, dict) and "tasks_output" in output:
        output = output.get("raw")  # OpenInference's CrewAI kickoff: its CrewOutput, whole
    if output is not None and _text(output) is None and llms:
        output = _repr_answer(spans)
    elif output is None and "output.value" not in a and "openinference.span.kind" not in a:
        output = _genai_answer(a) if "gen_ai.output.messages" in a else None
        if output is None:
            output = _workflow_answer(raws)
        if output is None and llms:
            output = _text(llms[-1].output)
        if output is None:
            output = a.get("crewai.crew.result")
    return inputs, output


def _query_text(value: Any) -> Any:
    """The text of a LlamaIndex query or its answer as OpenLLMetry writes them: the call's
    arguments by name (``{"str_or_query_bundle": ...}``), a ``QueryBundle``'s
    ``query_str``, a ``Response``'s ``response``; other values as they are."""
    if isinstance(value, dict):
        for key in ("query_str", "response"):
            if isinstance(value.get(key), str):
                return value[key]
        if len(value) == 1:
            return _query_text(next(iter(value.values())))
    return value


ROOT_MISSING = (
    "its root span is not among the spans read (the run raised where its instrumentor "
    "did not end that span, or the process stopped first): how it ended is unknown"
)


def _workflow_answer(raws: list[RawSpan]) -> Any:
    """A LlamaIndex agent's answer where OpenLLMetry wrote it: the result of the workflow
    step that ended the run (``traceloop.entity.output``, an ``AgentOutput`` whose
    ``response`` message's text blocks are the answer, a ReAct agent's without its
    "Thought:" and "Answer:")."""
    for raw in reversed(raws):
        ended = _json(raw.attributes.get(ENTITY_OUTPUT))
        result = ended.get("result") if isinstance(ended, dict) else None
        response = result.get("response") if isinstance(result, dict) else None
        if isinstance(response, dict) and isinstance(response.get("blocks"), list):
            return "".join(
                str(block.get("text") or "")
                for block in response["blocks"]
                if isinstance(block, dict) and block.get("block_type") == "text"
            )
    return None


def _repr_answer(spans: list[Span]) -> Any:
    """A LlamaIndex agent's answer where its run's output is a repr (OpenInference writes
    the StopEvent's, cut at 200 characters): its last model call's text, or a ReAct
    agent's what its output parser read from that call (``{"thought": ..., "response":
    ...}``, not the call's "Thought: ... Answer: ..."). The calls that turn the answer
    into its ``output_cls`` afterwards (a ``StructuredLLM``'s) are not the agent's."""
    within = _structuring(spans)
    for span in reversed(spans):
        if span.id in within:
            continue
        if span.kind is SpanKind.LLM:
            return span.output
        parsed = span.output
        if (
            isinstance(parsed, dict)
            and "thought" in parsed
            and isinstance(parsed.get("response"), str)
        ):
            return parsed["response"]
    return None


def _structuring(spans: list[Span]) -> set[str]:
    """The ids of the spans of a LlamaIndex structured-output call (a span whose name says
    "structured", and everything inside it), as agenteval's adapter tells them apart."""
    found: set[str] = set()
    for span in spans:  # a parent starts before its children
        if "structured" in span.name.lower() or span.parent_id in found:
            found.add(span.id)
    return found


_STOP_EVENT = re.compile(r"StopEvent\(result=(.*)\)", re.DOTALL)


def _stop_result(value: Any) -> Any:
    """A LlamaIndex workflow's answer where OpenInference wrote the ``StopEvent`` it ended
    with as its repr (``StopEvent(result='Refunded.')``): the result, as the adapter
    records it (a literal read back; other text as it stands)."""
    found = _STOP_EVENT.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        return value
    try:
        return ast.literal_eval(found.group(1))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return found.group(1)


def _answer_schemas(spans: list[Span]) -> set[str]:
    """The names a run with a structured answer's last model call "called" that no tool ran:
    its answer's schema, offered to the model as a tool (``ToolStrategy``), none of the
    agent's tools (as agenteval's adapter records it)."""
    final = next((span for span in reversed(spans) if span.kind is SpanKind.LLM), None)
    ran = {span.tool_call.name for span in spans if span.tool_call is not None}
    asked = {call.name for call in final.requested_tool_calls} if final is not None else set()
    return asked - ran


def _trace(trace_id: str, raws: list[RawSpan]) -> Trace:
    # our own export says the order; other sources are in start order
    raws.sort(key=lambda r: (r.attributes.get("agenteval.span.index", -1), r.start_ns or 0))
    present = {raw.span_id for raw in raws}
    guessed: set[str] = set()
    spans = [_span(raw, guessed) for raw in raws]
    ids = {raw.span_id: span.id for raw, span in zip(raws, spans, strict=True)}
    for raw, span in zip(raws, spans, strict=True):
        if span.parent_id is None and raw.parent_id in present:
            span.parent_id = ids[raw.parent_id]
    tops = [i for i, raw in enumerate(raws) if raw.parent_id not in present]
    # a run's spans under more than one parent none of them holds: its root never came
    # (the instrumentor did not end it when the run raised, or the process died); one
    # such span alone is a run under a parent elsewhere (a service's request span)
    rootless = len(tops) > 1 and all(raws[i].parent_id for i in tops)
    root_index = tops[0] if tops else 0
    if root_index:  # the root first: spans are in start order, and the root started first
        spans.insert(0, spans.pop(root_index))
        raws.insert(0, raws.pop(root_index))
    root, a = spans[0], raws[0].attributes
    if "agenteval.trace.id" in a:
        return Trace(
            schema_version=a.get("agenteval.trace.schema_version", 1),
            id=a["agenteval.trace.id"],
            session_id=a.get("gen_ai.conversation.id"),
            input=_json(a["agenteval.trace.input"]) if "agenteval.trace.input" in a else root.input,
            output=_json(a["agenteval.trace.output"])
            if "agenteval.trace.output" in a
            else root.output,
            error=a.get("agenteval.trace.error"),
            spans=[] if a.get(SPANLESS) else spans,
            tools=[ToolSpec.model_validate(t) for t in _readable(a, "agenteval.trace.tools") or ()],
            metadata=_readable(a, "metadata") or {},
            framework=a.get("agenteval.trace.framework"),
            start_time=a.get("agenteval.trace.start_time"),
            end_time=a.get("agenteval.trace.end_time"),
            status=RunStatus(a["agenteval.trace.status"])
            if "agenteval.trace.status" in a
            else None,
            status_reason=a.get("agenteval.trace.status_reason"),
            alerts=[
                LoopAlert.model_validate(x) for x in _readable(a, "agenteval.trace.alerts") or ()
            ],
        )
    waiting = _drop_waits(raws, spans)
    structuring = _structuring(spans)
    for span in spans:
        if span.kind is SpanKind.TOOL and span.id in structuring:
            # the answer's schema offered as a tool, to shape it into a LlamaIndex agent's
            # output_cls: no tool of the agent ran
            span.kind, span.tool_call = SpanKind.CHAIN, None
    _link_calls(spans, guessed)
    _graph_agents(raws, spans)
    _traceloop_graph_agents(raws, spans)
    if root.kind is SpanKind.CHAIN and "openinference.span.kind" in a:
        root.kind = SpanKind.AGENT  # the whole run of a graph or workflow agent, as ours say
    inputs, output = _conversation(root, spans, raws)
    schemas: set[str] = set()
    structured = root.output.get("structured_response") if isinstance(root.output, dict) else None
    if structured is not None:  # create_agent(response_format=...): the answer in its schema
        output = structured
        schemas = _answer_schemas(spans)
    tools: dict[str, ToolSpec] = {}
    for raw, span in zip(raws, spans, strict=True):
        if span.attributes.get(INTERNAL_CALL):  # a tool selector's schema is no tool
            continue
        for tool in _tools(raw.attributes):
            if tool.name not in schemas:
                tools.setdefault(tool.name, tool)
    _name_bare_values(spans, guessed, tools)
    _unrun_calls(raws, spans)  # after every use of raws and spans side by side
    metadata = _json(a.get("metadata")) if "metadata" in a else {}
    if not isinstance(metadata, dict):
        metadata = {"metadata": metadata}
    metadata = {k: v for k, v in metadata.items() if not str(k).startswith(_BOOKKEEPING)}
    if a.get("user.id"):
        metadata["user_id"] = a["user.id"]
    resume = _resume_value(_json(a.get("input.value")))
    if resume is not None:  # a LangGraph run resumed with Command(resume=...)
        metadata[RESUME] = resume
    if not any(span.kind in (SpanKind.LLM, SpanKind.TOOL) for span in spans):
        # OpenInference's and OpenLLMetry's CrewAI spans: the crew's input and output only
        metadata[STEPS_UNRECORDED] = True
    trace = Trace(
        id=trace_id,
        # OpenLLMetry's CrewAI run: the crew's id, as agenteval's listener keys a kickoff's
        # session when the application names none
        session_id=a.get("gen_ai.conversation.id")
        or a.get("session.id")
        or _kickoff_inputs(a).get("session_id")
        or a.get("crewai.crew.id")
        or a.get(CREW_ID),
        input=inputs,
        output=output,
        error=root.error,
        spans=spans,
        tools=list(tools.values()),
        metadata=metadata,
        framework=_framework(raws),
        start_time=root.start_time,
        end_time=root.end_time,
    )
    trace.status, trace.status_reason = trace.ended_status()
    if trace.status is RunStatus.OK and isinstance(output, str) and output in CLASSIC_STOPS:
        trace.status, trace.status_reason = RunStatus.LIMIT, output  # stopped at its limit
    if rootless:  # how the run ended is not in the spans: neither a pass nor a failure
        trace.status, trace.status_reason = RunStatus.UNFINISHED, ROOT_MISSING
        return trace
    raised = _raised(raws[0])
    if raised is not None:  # what the exception that ended it says: a limit, a timeout
        ended = limit_or_timeout(*raised)
        if ended is not None:
            trace.status, trace.status_reason = ended, trace.error
        elif stopped_by_caller(raised[0]):
            trace.status, trace.status_reason = RunStatus.CANCELLED, CANCELLED_BY_CALLER
    if any(name == "span.cancelled" for name, _ in raws[0].events):  # LlamaIndex's cancel
        trace.status, trace.status_reason = RunStatus.CANCELLED, CANCELLED_BY_CALLER
    paused = _interrupt(raws) or waiting or _asked(raws)
    if paused is not None and (trace.error is None or trace.status is RunStatus.CANCELLED):
        # a pause for a human: no answer yet (the root's output is the graph's state, whose
        # last message is the model's call waiting for approval); the resumed run answers
        trace.status, trace.status_reason, trace.output = RunStatus.INTERRUPTED, paused, None
    return trace


_UNNAMED_GRAPH = "LangGraph"
"""The name LangChain gives a graph run that was given none."""

_COMMAND_FIELDS = frozenset({"graph", "update", "resume", "goto"})
"""The fields of LangGraph's ``Command`` as OpenInference writes it (a run's input, a
tool's output)."""


def _command(value: Any) -> dict[str, Any] | None:
    """``value`` when it is a LangGraph ``Command`` as OpenInference writes it, else None."""
    return value if isinstance(value, dict) and value.keys() == _COMMAND_FIELDS else None


def _resume_value(value: Any) -> Any:
    """The answer a run was resumed with, when its input is a LangGraph ``Command`` with a
    ``resume`` value (a human's answer to an interrupt), else None."""
    command = _command(value)
    return command["resume"] if command is not None else None


def _crew_request(raws: list[RawSpan]) -> str | None:
    """What a crew OpenLLMetry recorded was asked: its first task's description (as
    agenteval's CrewAI adapter takes it for a kickoff without inputs; OpenLLMetry records no
    inputs, only the descriptions they filled in)."""
    return next(
        (
            str(raw.attributes["crewai.task.description"])
            for raw in raws
            if "crewai.task.description" in raw.attributes
        ),
        None,
    )


def _kickoff_inputs(a: dict[str, Any]) -> dict[str, Any]:
    """The inputs a crew was kicked off with, as OpenInference writes them on its kickoff
    span (``crew_inputs``, JSON; empty for a kickoff without inputs)."""
    given = _json(a.get(CREW_INPUTS)) if a.get(CREW_INPUTS) else None
    return given if isinstance(given, dict) else {}


def _kickoff_request(a: dict[str, Any]) -> Any:
    """What a crew OpenInference recorded was asked, as agenteval's CrewAI adapter takes
    it: its inputs without the session key, else (a kickoff without inputs) its first
    task's description (``crew_tasks``)."""
    request = {k: v for k, v in _kickoff_inputs(a).items() if k != "session_id"}
    if request:
        return request
    tasks = _json(a.get(CREW_TASKS))
    if isinstance(tasks, list) and tasks and isinstance(tasks[0], dict):
        return tasks[0].get("description")
    return None


_WAITING_CLASS = re.compile(r"<class '(?:[\w]+\.)*(\w+)'>")


def _drop_waits(raws: list[RawSpan], spans: list[Span]) -> str | None:
    """Take out the tool spans of calls suspended to wait for an event (LlamaIndex's
    ``ctx.wait_for_event``, which raises ``WaitingForEvent`` until the event comes and then
    runs the call again): no call, and no failure. Why the run waits, when no call of that
    tool ran after the last such span (a run stopped while it waited), else None."""
    kept: list[tuple[RawSpan, Span]] = []
    waiting: tuple[str, str] | None = None  # (tool, why) of the last wait not yet answered
    for raw, span in zip(raws, spans, strict=True):
        waited = next(
            (
                str(event.get("exception.message", ""))
                for name, event in raw.events
                if name == "exception"
                and str(event.get("exception.type", "")).endswith("WaitingForEvent")
            ),
            None,
        )
        if span.tool_call is not None and waited is not None:
            awaited = _WAITING_CLASS.search(waited)
            why = f"waiting for {awaited.group(1) if awaited else 'an event'}"
            waiting = (span.tool_call.name, why)
            continue
        if span.tool_call is not None and waiting is not None and waiting[0] == span.tool_call.name:
            waiting = None  # the event came: the call ran
        kept.append((raw, span))
    raws[:] = [raw for raw, _ in kept]
    spans[:] = [span for _, span in kept]
    return waiting[1] if waiting is not None else None


_ASKED = re.compile(r"(\w*InputRequiredEvent)\((.*)\)", re.DOTALL)
_PREFIX = re.compile(r"prefix=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")


def _asked(raws: list[RawSpan]) -> str | None:
    """Why a LlamaIndex workflow waits, when its last step returned an
    ``InputRequiredEvent`` (written as its repr) and no step ran after it: "waiting for a
    response to InputRequiredEvent: <the prefix asked>", as the adapter says it."""
    steps = raws[1:]
    last = steps[-1] if steps else None
    output = last.attributes.get("output.value") if last is not None else None
    found = _ASKED.fullmatch(output) if isinstance(output, str) else None
    if found is None:
        return None
    prefix = _PREFIX.search(found.group(2))
    asked = ast.literal_eval(prefix.group(1)) if prefix is not None else ""
    return f"waiting for a response to {found.group(1)}" + (f": {asked}" if asked else "")


_INTERRUPTS = ("GraphInterrupt", "NodeInterrupt")
"""LangGraph's exceptions for a run that pauses for a human (``interrupt()``): recorded as
an exception event of the node that paused, whose span ends without an error."""

_INTERRUPT_VALUE = re.compile(r"Interrupt\(value=(.*?), (?:id='([^']+)'|resumable=|ns=)", re.DOTALL)
"""An interrupt's value (its repr) and id (LangGraph's that give one) in its exception."""


def _interrupt_messages(raws: list[RawSpan]) -> Iterator[str]:
    """The text of each exception LangGraph's interrupt raised in a run's spans."""
    for raw in raws:
        for name, event in raw.events:
            kind = str(event.get("exception.type", ""))
            if name == "exception" and kind.rsplit(".", 1)[-1] in _INTERRUPTS:
                yield str(event.get("exception.message", ""))


def _interrupts(messages: list[str]) -> dict[str, tuple[bool, Any]]:
    """The interrupts those exceptions name, once each: by id (else by value's repr),
    whether the id is known, and the value."""
    found: dict[str, tuple[bool, Any]] = {}
    for message in messages:
        for value, interrupt_id in _INTERRUPT_VALUE.findall(message):
            found.setdefault(interrupt_id or value, (bool(interrupt_id), _literal(value)))
    return found


def _interrupt(raws: list[RawSpan]) -> str | None:
    """Why a foreign run paused, when a span of it raised LangGraph's interrupt: "waiting
    for a human: " and the value of each interrupt it waits at, as the adapter says it (the
    exception's text when its values cannot be read)."""
    messages = list(_interrupt_messages(raws))
    if not messages:
        return None
    values = sorted(str(value) for _, value in _interrupts(messages).values())
    return "waiting for a human: " + ("; ".join(values) if values else messages[0])


def _interrupts_asked(raws: list[RawSpan]) -> dict[str, Any]:
    """What each interrupt a foreign run paused at asked, by the interrupt's id, as the
    adapter keeps them for the run that resumes it."""
    found = _interrupts(list(_interrupt_messages(raws)))
    return {key: value for key, (by_id, value) in found.items() if by_id}


def _literal(text: str) -> Any:
    """A value from its Python repr, or the repr's text when it is no literal."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _framework(raws: list[RawSpan]) -> str:
    for raw in raws:
        if "openinference.span.kind" in raw.attributes:
            return "openinference"
    return "otel"


def iter_otlp(
    source: str | os.PathLike[str] | dict[str, Any] | list[Any],
    *,
    on_progress: Callable[[int], None] | None = None,
    on_left_out: Callable[[str], None] | None = None,
) -> Iterator[Trace]:
    """:func:`import_otlp` one trace at a time, for span files of any size.

    The source is read twice. The first pass checks every document and finds the document
    that holds each trace's last span, so a bad line raises here, before any trace is
    given. The second gives each trace as soon as its last span is read (and those before
    it are given), in the order of their first spans, as :func:`import_otlp` lists them.
    Memory holds the traces whose spans are still being read and each trace's id, never
    the file: a collector writes a trace's spans within moments of each other.

    Args:
        source: as :func:`import_otlp`.
        on_progress: called with the bytes read since its last call, in both passes (they
            add up to twice the file's size).
        on_left_out: called with the trace id of each trace left out as no run (an agent
            being made, an index being built; see :func:`import_otlp`).

    Raises:
        CaptureError: as :func:`import_otlp`.
    """
    spans = SpanSource(source)
    last: dict[str, int] = {}
    documents = 0
    for documents, trace_ids in enumerate(spans.documents(TRACE_IDS, on_progress), start=1):
        for trace_id in trace_ids:
            last[trace_id] = documents
    if not last:
        raise CaptureError(f"{spans.where}: holds no spans")
    # what the file held at the first pass: a collector may be appending to it
    found = _grouped(islice(spans.documents(SPANS, on_progress), documents), last)
    return _runs(found, on_left_out)


def _runs(found: Iterator[_Found], on_left_out: Callable[[str], None] | None) -> Iterator[Trace]:
    """The traces found, each one left out as no run said to ``on_left_out``. A run another
    instrumentor recorded as resumed after a pause for a human names the paused run of its
    session before it (:data:`RESUMES_TRACE_ID`), as agenteval's LangChain adapter does (a
    run agenteval exported says itself what it resumed)."""
    # session → its paused run, not resumed yet, and what its interrupts asked by id
    paused = LatestKept[str, tuple[str, dict[str, Any]]](PAUSES_KEPT)
    for found_run in found:
        trace = found_run.trace
        if trace is None:
            if on_left_out is not None:
                on_left_out(found_run.trace_id)
            continue
        session = trace.session_id
        if session is not None:
            earlier = paused.pop(session, None)
            if earlier is not None and found_run.foreign and RESUME in trace.metadata:
                trace.metadata.setdefault(RESUMES_TRACE_ID, earlier[0])
                questions = resume_questions(trace.metadata[RESUME], earlier[1])
                if questions is not None:
                    trace.metadata.setdefault(RESUME_QUESTIONS, questions)
            if trace.status is RunStatus.INTERRUPTED:
                paused[session] = (trace.id, found_run.asked)
        yield trace


PAUSES_KEPT = 10_000
"""Sessions whose paused run :func:`iter_otlp` keeps for the run that resumes it."""


def _grouped(batches: Iterator[list[RawSpan]], last: dict[str, int]) -> Iterator[_Found]:
    """Each trace id's run, as soon as its last span is read."""
    held: dict[str, list[RawSpan]] = {}
    order: deque[str] = deque()  # held trace ids, by first span
    for document, batch in enumerate(batches, start=1):
        for raw in batch:
            group = held.get(raw.trace_id)
            if group is None:
                group = held[raw.trace_id] = []
                order.append(raw.trace_id)
            group.append(raw)
        while order and last.get(order[0], document) <= document:
            trace_id = order.popleft()
            yield _found(trace_id, held.pop(trace_id))
    for trace_id in order:  # only if the file changed between the passes: nothing is lost
        yield _found(trace_id, held[trace_id])


class _Found(NamedTuple):
    """One trace id's run, as :func:`_runs` reads it."""

    trace_id: str
    trace: Trace | None
    """None when its spans record no run."""
    foreign: bool
    """Whether another instrumentor than agenteval's export wrote it."""
    asked: dict[str, Any]
    """What each interrupt it paused at asked, by id (a foreign run's)."""


def _found(trace_id: str, raws: list[RawSpan]) -> _Found:
    run = _run(trace_id, raws)  # puts the root first
    foreign = "agenteval.trace.id" not in raws[0].attributes
    paused = foreign and run is not None and run.status is RunStatus.INTERRUPTED
    return _Found(trace_id, run, foreign, _interrupts_asked(raws) if paused else {})


def _run(trace_id: str, raws: list[RawSpan]) -> Trace | None:
    """The trace of one trace id's spans, unless they record no run: an agent being made
    (the GenAI conventions' ``create_agent``, which OpenLLMetry writes as a trace of its own
    when LangChain's ``create_agent`` is called), or work that calls no model, tool or
    retriever, runs no agent, and neither asks nor answers in text (an index being built:
    its documents split into nodes, a batch of embeddings), which every metric would pass
    or skip for want of a run to score. Work that did not end "ok" (it failed, paused for a
    human, or its end is not in the spans) is kept."""
    if all(raw.attributes.get(OPERATION_NAME) == "create_agent" for raw in raws):
        return None
    trace = _trace(trace_id, raws)
    if (
        trace.status is not RunStatus.OK
        or _text(trace.input) is not None
        or _text(trace.output) is not None
        or any(span.kind in _RUN_STEPS for span in trace.spans)
        or any(_runs_an_agent(raw.attributes) for raw in raws)
    ):
        return trace
    return None


_RUN_STEPS = (SpanKind.LLM, SpanKind.TOOL, SpanKind.RETRIEVER)


def _runs_an_agent(a: dict[str, Any]) -> bool:
    """Whether a span is an agent's, as its source marks it: agenteval's own export,
    OpenInference's ``AGENT`` kind, the GenAI conventions' ``invoke_agent``, OpenLLMetry's
    ``agent`` span kind, or a CrewAI crew's kickoff (whose spans hold no model call)."""
    return (
        "agenteval.span.id" in a
        or str(a.get("openinference.span.kind", "")).upper() == "AGENT"
        or a.get(OPERATION_NAME) == "invoke_agent"
        or a.get("traceloop.span.kind") == "agent"
        or "crewai.crew.id" in a
        or CREW_ID in a
    )


def import_otlp(source: str | os.PathLike[str] | dict[str, Any] | list[Any]) -> list[Trace]:
    """Traces from OpenTelemetry span files: OTLP JSON (camelCase or snake_case), JSON Lines,
    the SDK's span JSON, or Phoenix's span API output; a path, JSON text or parsed value.

    Spans are grouped by trace id, in start order, root first; traces are listed in the
    order of their first spans (:func:`iter_otlp` gives them one at a time). Spans written by
    :class:`OTelExporter` come back as the trace that was exported. Spans from OpenInference
    instrumentors (LangChain/LangGraph, LlamaIndex) and GenAI-convention instrumentors are
    mapped to what agenteval's adapters record: the user's message as input, the final
    answer as output, tool arguments and results as the tool saw them, call ids from the
    model's tool calls, tool definitions from ``llm.tools``. Spans that record no run (an
    agent being made; an index being built, which asks nothing, answers nothing and calls
    no model or tool) are left out; a run whose root span is missing is ``unfinished``.

    Raises:
        CaptureError: the source is missing, not JSON (or not UTF-8), or holds no spans
            (the message names the file and line).
    """
    return list(iter_otlp(source))


import_otlp_json = import_otlp
"""The former name of :func:`import_otlp` (it reads more than OTLP JSON now)."""
