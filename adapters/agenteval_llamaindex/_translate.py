"""LlamaIndex instrumentation events → core spans. Runs on the event pump's thread."""

from __future__ import annotations

import base64
import binascii
import itertools
import re
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from llama_index.core.agent.workflow.prompts import DEFAULT_EARLY_STOPPING_PROMPT
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.base.llms.types import (
    ChatMessage,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
from llama_index.core.chat_engine.types import StreamingAgentChatResponse
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.tools.types import BaseTool
from llama_index.core.workflow import Event

from agenteval_core import (
    AGENT_NAME,
    GRAPH_STEP,
    INTERNAL_CALL,
    REASONING,
    REFUSAL,
    TOOL_NOT_RUN,
    RunStatus,
    SpanKind,
    ToolCall,
    ToolSpec,
    plain,
)
from agenteval_core.recording import (
    CANCELLED_BY_CALLER,
    FINISH_REASONS,
    INPUT_TOKENS,
    OPERATION_NAME,
    OUTPUT_TOKENS,
    REQUEST_MODEL,
    RESUMES_TRACE_ID,
    AlertEvent,
    Recorder,
    error_text,
    limit_or_timeout,
    no_such_tool,
    react_actions,
    step_thought,
)

__all__ = [
    "SESSION_TAG",
    "Instrumented",
    "SpanDropped",
    "SpanExited",
    "SpanStarted",
    "Streaming",
    "Translator",
    "reply_text",
]

WAITING_IN_TOOL = "waiting in tool call"
"""What a run stopped while a tool waited for a human is kept under, beside that call's id:
the run resumed from its saved context runs the call again."""

SESSION_TAG = "agenteval_session"
"""The tag a root span carries for the session of ``agenteval_core.session(...)``."""


BOOKKEEPING_STEPS = frozenset(
    f"{workflow}.{step}"
    for workflow in ("BaseWorkflowAgent", "AgentWorkflow")  # where LlamaIndex defines them
    for step in ("init_run", "setup_agent", "parse_agent_output", "aggregate_tool_results")
)
"""The steps of a workflow agent around its turns (run_agent_step) and tool calls
(call_tool): a model call in one is the framework's (a memory block extracting facts as the
history is stored, the answer shaped into output_cls), no step of the agent."""


def _name(span_id: str) -> str:
    """Dispatcher span ids are ``Class.method-uuid``."""
    return span_id.rsplit("-", 5)[0] if span_id.count("-") >= 5 else span_id


def _message_text(message: ChatMessage | None) -> str:
    if message is None:
        return ""
    texts = [block.text for block in message.blocks if isinstance(block, TextBlock)]
    return "".join(texts) if texts else (message.content or "")


def _messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as a model call's input, in the form the LangChain adapter records: role,
    content (its text; a list of parts when it holds more than text, an image say) and the
    tool calls an assistant message made."""
    sent = []
    for message in messages:
        blocks = message.blocks
        record: dict[str, Any] = {"role": str(message.role.value)}
        if all(isinstance(block, TextBlock | ToolCallBlock) for block in blocks):
            record["content"] = _message_text(message)
        else:
            record["content"] = [
                _part(block) for block in blocks if not isinstance(block, ToolCallBlock)
            ]
        called = [
            {"name": call.name, "args": call.arguments, "id": call.id}
            for call in _native_calls(message)
        ]
        if called:
            record["tool_calls"] = called
        sent.append(record)
    return sent


_MEDIA_DATA = {"image": "image", "audio": "audio", "video": "video", "document": "data"}
"""The field that holds a media block's own bytes, by its ``block_type``."""


def _part(block: Any) -> dict[str, Any]:
    """A content block as a part of a message's content: text as text, a thinking block's
    text, and media (an image, audio, video, a document) by type, MIME type and where it is:
    its URL, path, or its bytes as a data URL (which the redactor omits when oversized)."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    kind = str(getattr(block, "block_type", type(block).__name__))
    if kind == "thinking":
        return {"type": kind, "text": getattr(block, "content", None) or ""}
    if kind not in _MEDIA_DATA:  # a citation and blocks yet to come: their fields
        fields = plain(block)
        return {"type": kind, **(fields if isinstance(fields, dict) else {})}
    mime = next(
        (
            str(value)
            for name in ("image_mimetype", "video_mimetype", "document_mimetype")
            if (value := getattr(block, name, None))
        ),
        f"audio/{block.format}" if getattr(block, "format", None) else None,
    )
    part: dict[str, Any] = {"type": kind, "mime_type": mime}
    data = getattr(block, _MEDIA_DATA[kind], None)
    if getattr(block, "url", None) is not None:
        part["url"] = str(block.url)
    elif getattr(block, "path", None) is not None:
        part["path"] = str(block.path)
    elif isinstance(data, bytes) and data:
        # LlamaIndex keeps an image's bytes base64-encoded, and audio's as given
        try:
            base64.b64decode(data, validate=True)
            encoded = data.decode("ascii")
        except (binascii.Error, ValueError):
            encoded = base64.b64encode(data).decode("ascii")
        part["url"] = f"data:{mime or 'application/octet-stream'};base64,{encoded}"
    return part


UNNAMED_MODEL = "unknown"
"""The ``model_name`` LlamaIndex gives a model that names none (a local model, a mock)."""


def _model_name(described: dict[str, Any]) -> Any:
    """The model a call went to, from the LLM's description in its start event: its
    ``model`` field (earlier LlamaIndex releases describe an LLM by all its fields), its
    metadata's ``model_name`` (``to_payload`` now gives the class name and the metadata),
    else the LLM's class name."""
    named = described.get("model_name")
    return (
        described.get("model")
        or (named if named != UNNAMED_MODEL else None)
        or described.get("class_name")
    )


def _tool_specs(tools: Any) -> list[ToolSpec]:
    specs = []
    for tool in tools or []:
        metadata = getattr(tool, "metadata", None)
        if metadata is None:
            continue
        try:
            parameters = metadata.get_parameters_dict()
        except Exception:
            parameters = None
        specs.append(
            ToolSpec(
                name=metadata.name or "tool",
                description=metadata.description or "",
                parameters=parameters,
            )
        )
    return specs


def _user_message(arguments: dict[str, Any]) -> Any:
    """The user's message of an agent run, from ``run(user_msg=...)`` or its start event;
    for a custom workflow, what it was run with (``run(order="A-1")`` → ``{"order": "A-1"}``);
    a query engine's or retriever's query, a chat engine's message."""
    query = arguments.get("str_or_query_bundle")
    if query is not None:
        return getattr(query, "query_str", query)
    if isinstance(arguments.get("message"), str):
        return arguments["message"]
    user_msg = arguments.get("user_msg") or (arguments.get("kwargs") or {}).get("user_msg")
    start_event = arguments.get("start_event")
    if user_msg is None and start_event is not None:
        user_msg = getattr(start_event, "user_msg", None)
        if user_msg is None and callable(getattr(start_event, "to_dict", None)):
            return start_event.to_dict() or None
    return _message_text(user_msg) if isinstance(user_msg, ChatMessage) else user_msg


def _request_in(event: Any) -> str | None:
    """The request an agent workflow's step event carries (``AgentInput``, ``AgentSetup``:
    the conversation so far, whose last user message the run answers), else None."""
    history = getattr(event, "input", None)
    if not isinstance(history, list):
        return None
    asked = [m for m in history if isinstance(m, ChatMessage) and m.role == MessageRole.USER]
    return _message_text(asked[-1]) if asked else None


def _resumes(arguments: dict[str, Any]) -> bool:
    """Whether a workflow's ``run`` goes on from a saved context that was running (a run
    stopped while it waited for a human, resumed: ``run(ctx=Context.from_dict(...))``),
    with no start event of its own: its request is in the state it goes on from."""
    state = arguments.get("init_state")
    return arguments.get("start_event") is None and getattr(state, "is_running", False) is True


def _human_answer(event: Any) -> Any:
    """What a human answered, when ``event`` is a ``HumanResponseEvent``, else None."""
    if "HumanResponseEvent" not in {c.__name__ for c in type(event).__mro__}:
        return None
    return getattr(event, "response", None)


RETRIEVALS = (".retrieve", ".aretrieve")
"""A retriever's public methods: a retrieval inside a run (a query engine's, a tool's) is a
retriever span; the private ``_retrieve`` inside it is part of it."""


def _documents(nodes: Any) -> list[dict[str, Any]]:
    """What a retrieval found: each node's id, text and score, best first (as returned)."""
    return [
        {"id": found.node.node_id, "content": found.node.get_content(), "score": found.score}
        for found in nodes
    ]


def _direct_call(tool: BaseTool, arguments: dict[str, Any]) -> ToolCall:
    """A call of ``tool.call`` / ``tool.acall`` as its caller made it (no id: no model asked
    for it)."""
    given = dict(arguments.get("kwargs") or {})
    positional = arguments.get("args")
    if positional:
        given["args"] = list(positional)
    return ToolCall(id=None, name=tool.metadata.name or "tool", arguments=plain(given))


def _is_stream(result: Any) -> bool:
    """Whether ``result`` is a streamed answer its caller reads (turning it into text here
    would read the caller's stream)."""
    return isinstance(
        result, StreamingResponse | AsyncStreamingResponse | StreamingAgentChatResponse
    )


def _output_text(result: Any) -> Any:
    """The final answer of an agent run's StopEvent (an AgentOutput with a response message)."""
    if _is_stream(result):
        return None
    value = getattr(result, "result", result)
    response = getattr(value, "response", None)
    if isinstance(response, ChatMessage):
        return _message_text(response)
    return str(value) if value is not None else None


def requested_call(name: str, arguments: dict[str, Any]) -> ToolCall | None:
    """The tool call a ``BaseWorkflowAgent.call_tool`` span is about to make, if it is one."""
    request = arguments.get("ev") if name.endswith("call_tool") else None
    if request is None:
        return None
    return ToolCall(
        id=getattr(request, "tool_id", None),
        name=getattr(request, "tool_name", "tool"),
        arguments=dict(getattr(request, "tool_kwargs", {}) or {}),
    )


def tool_returned(result: Any) -> tuple[Any, str | None]:
    """What a ``call_tool`` step gave its model, as the trace records it: its output's
    content, and that content as the error when the output says it is one."""
    output = getattr(result, "tool_output", None)
    content = getattr(output, "content", None) if output is not None else None
    failed = output is not None and getattr(output, "is_error", False)
    return plain(content), (str(content or "tool error") if failed else None)


def _no_such_tool(output: Any) -> bool:
    """Whether a ``call_tool`` step's output is LlamaIndex's answer to a call of a tool the
    agent does not have: an error with no tool's output (a tool that raised keeps its
    error's text there), no tool ran."""
    return (
        getattr(output, "is_error", False) is True
        and getattr(output, "raw_output", "") is None
        and no_such_tool(str(output.tool_name), getattr(output, "content", None))
    )


def _native_calls(message: ChatMessage | None) -> list[ToolCall]:
    return [
        ToolCall(
            id=block.tool_call_id,
            name=block.tool_name,
            arguments=block.tool_kwargs
            if isinstance(block.tool_kwargs, dict)
            else {"input": block.tool_kwargs},
        )
        for block in (message.blocks if message is not None else [])
        if isinstance(block, ToolCallBlock)
    ]


def _reasoning(message: ChatMessage | None) -> str | None:
    """The reasoning the model gave with its reply: its thinking blocks' text."""
    said = [
        block.content
        for block in (message.blocks if message is not None else [])
        if isinstance(block, ThinkingBlock) and block.content
    ]
    return "\n\n".join(said) or None


def _said(holder: Any, key: str) -> Any:
    """``key`` of a provider's raw response or a part of it: LlamaIndex's integrations keep
    the SDK's object (OpenAI's) or a dict of its fields (Anthropic's, Ollama's)."""
    return holder.get(key) if isinstance(holder, dict) else getattr(holder, key, None)


def _usage(response: Any) -> dict[str, Any]:
    """Token counts as GenAI attributes, from the provider's raw response."""
    usage = _said(getattr(response, "raw", None), "usage")
    if usage is None:
        return {}
    return {
        INPUT_TOKENS: _said(usage, "prompt_tokens") or _said(usage, "input_tokens") or 0,
        OUTPUT_TOKENS: _said(usage, "completion_tokens") or _said(usage, "output_tokens") or 0,
    }


def _first_choice(raw: Any) -> Any:
    """The first of an OpenAI-style response's ``choices``, or ``None``."""
    choices = _said(raw, "choices")
    return choices[0] if isinstance(choices, list | tuple) and choices else None


def _finish_reason(response: Any) -> list[str]:
    """Why the model stopped, as its provider said, from the raw response (of a streamed
    reply, its last chunk): OpenAI's choice ``finish_reason``, Anthropic's ``stop_reason``,
    Ollama's ``done_reason``; none when the provider said nothing."""
    raw = getattr(response, "raw", None)
    choice = _first_choice(raw)
    reason = (
        _said(choice, "finish_reason")
        or _said(raw, "stop_reason")
        or _said(raw, "done_reason")
        or _said(raw, "finish_reason")
    )
    reason = getattr(reason, "value", reason)  # an SDK's enum of reasons
    return [reason] if isinstance(reason, str) and reason else []


REFUSAL_STOPS = frozenset({"refusal", "safety"})
"""Finish reasons (lower-cased) that say the provider refused to answer: Anthropic's
``refusal`` stop, Gemini's ``SAFETY`` stop."""


def _refusal(response: Any) -> str | None:
    """The provider's explicit refusal in a reply without text, from its raw response:
    OpenAI's message ``refusal`` (its text), else a refusing stop (:data:`REFUSAL_STOPS`:
    ``""``, the provider gave no text); else ``None``."""
    choice = _first_choice(getattr(response, "raw", None))
    said = _said(_said(choice, "message"), "refusal") if choice is not None else None
    if isinstance(said, str) and said:
        return said
    if any(reason.lower() in REFUSAL_STOPS for reason in _finish_reason(response)):
        return ""
    return None


REFUSED_HANDOFF = "Please select a valid agent to hand off to."
"""How an AgentWorkflow's ``handoff`` tool ends its answer to a handoff it refused (to an
agent the workflow does not have, or one the current agent may not hand off to): it returns
the text as a result, and the current agent keeps control."""


def _refused_handoff(output: Any, content: Any) -> bool:
    """Whether a tool's output is the ``handoff`` tool refusing the handoff."""
    return (
        getattr(output, "tool_name", None) == "handoff"
        and isinstance(content, str)
        and REFUSED_HANDOFF in content
    )


def _waiting_reason(error: BaseException | None) -> str | None:
    """Why a step waits, when ``error`` is how LlamaIndex workflows suspend it
    (``WaitingForEvent``, raised by ``ctx.wait_for_event`` until the event comes: the step
    then runs again), else None: "waiting for HumanResponseEvent: Refund A-1?"."""
    if error is None or "WaitingForEvent" not in {c.__name__ for c in type(error).__mro__}:
        return None
    added = getattr(error, "add", None)
    awaited = getattr(getattr(added, "event_type", None), "__name__", "an event")
    asked = getattr(getattr(added, "waiter_event", None), "prefix", None)
    return f"waiting for {awaited}" + (f": {asked}" if asked else "")


def _input_asked(result: Any) -> tuple[str, str | None] | None:
    """Why a workflow waits, and what it asked, when a step's ``result`` is an
    ``InputRequiredEvent`` (the workflow then idles until a step takes the human's answer),
    else None: ("waiting for a response to InputRequiredEvent: Refund A-2?", "Refund A-2?")."""
    if "InputRequiredEvent" not in {c.__name__ for c in type(result).__mro__}:
        return None
    asked = getattr(result, "prefix", None)
    asked = asked if isinstance(asked, str) and asked else None
    reason = f"waiting for a response to {type(result).__name__}"
    return (f"{reason}: {asked}" if asked else reason), asked


_EARLY_STOP = re.compile(
    re.escape(DEFAULT_EARLY_STOPPING_PROMPT).replace(re.escape("{max_iterations}"), r"(\d+)")
)
"""LlamaIndex's last request to the model of an agent at its ``max_iterations`` with
``early_stopping_method="generate"`` (its system message; the number is the limit)."""


def _early_stop(messages: Any) -> str | None:
    """Why a request to the model ends its run at a limit: the agent reached
    ``max_iterations`` and LlamaIndex asks for a final answer without tools, else None."""
    last = messages[-1] if isinstance(messages, list) and messages else None
    found = _EARLY_STOP.fullmatch(str(getattr(last, "content", None) or ""))
    if found is None:
        return None
    return f"reached max_iterations ({found.group(1)}): LlamaIndex asked for a final answer"


class SpanStarted(NamedTuple):
    """LlamaIndex opened a span (the handler's ``new_span``)."""

    handle: Callable[[SpanStarted], None]
    span_id: str
    parent_id: str | None
    instance: Any
    bound_args: Any
    tags: dict[str, Any] | None
    at: float


class SpanExited(NamedTuple):
    """A span returned ``result``."""

    handle: Callable[[SpanExited], None]
    span_id: str
    result: Any
    at: float


class SpanDropped(NamedTuple):
    """A span raised ``error`` (or was dropped without one)."""

    handle: Callable[[SpanDropped], None]
    span_id: str
    error: BaseException | None
    at: float


class Streaming(NamedTuple):
    """A span returned a stream (a query engine's streamed answer): it ends when the
    stream is read to its end (a later ``SpanExited`` with the text read)."""

    handle: Callable[[Streaming], None]
    span_id: str


class Instrumented(NamedTuple):
    """An instrumentation event (LLM chat start and end, a cancelled span)."""

    handle: Callable[[Instrumented], None]
    event: Any
    at: float
    said: str | None = None
    """A chat reply's text as the model gave it, read when the event came (see
    :func:`reply_text`)."""


def reply_text(event: Any) -> str | None:
    """The text of a chat end event's reply, read on the agent's thread as the event comes:
    a ReAct agent then cuts "Answer:" and what came before it out of that same message, in
    place, and read later on the recorder's thread the reply could be the cut answer.
    ``None`` for any other event."""
    if not isinstance(event, LLMChatEndEvent) or event.response is None:
        return None
    return _message_text(event.response.message)


class StepRetries:
    """The runs of workflow steps that have a retry policy, as the tasks of graph steps
    (:data:`GRAPH_STEP`): each run is a step of its own, and a run the policy makes after
    one raised (the same step given the same event objects again) is that step again. The
    calls a step made without an id and made again once the policy ran it again are then
    read as one call's runs, as LangGraph's ``RetryPolicy`` reruns are (its last run
    counts; the loop guard counts the call once), not as the same call asked for three
    times. Used on the recorder's thread only."""

    def __init__(self) -> None:
        self._numbers = itertools.count()
        self._workflows: dict[Hashable, Any] = {}  # a workflow run's span → the workflow
        # a run's root → the runs of its steps that raised: (parent, step, events, number)
        self._failed: dict[Hashable, list[tuple[Hashable, str, tuple[Any, ...], int]]] = {}
        # a step's open span → its run's root and what a run again would match it by
        self._open: dict[str, tuple[Hashable, Hashable, str, tuple[Any, ...], int]] = {}

    def workflow_started(self, span_id: str, workflow: Any) -> None:
        """A workflow (or a workflow agent) runs under ``span_id``: its steps run under it
        (the dispatcher gives a step's span no workflow)."""
        self._workflows[span_id] = workflow

    def step(
        self,
        span_id: str,
        above: list[str],
        name: str,
        arguments: dict[str, Any],
    ) -> int | None:
        """The graph step of a run of step ``name`` (``Flow.step``) under the spans
        ``above`` (innermost first, the run's root last), or ``None`` for a step of no
        retry policy."""
        workflow = next((self._workflows[key] for key in above if key in self._workflows), None)
        method = getattr(workflow, name.rpartition(".")[2], None)
        if getattr(getattr(method, "_step_config", None), "retry_policy", None) is None:
            return None
        root, parent = above[-1], above[0]
        events = tuple(value for value in arguments.values() if isinstance(value, Event))
        failed = self._failed.get(root, [])
        for index, (before, step, given, again) in enumerate(failed):
            if (
                (before, step) == (parent, name)
                and len(given) == len(events)
                and all(one is other for one, other in zip(given, events, strict=True))
            ):
                del failed[index]
                number = again
                break
        else:
            number = next(self._numbers)
        self._open[span_id] = (root, parent, name, events, number)
        return number

    def end(self, span_id: str, raised: bool) -> None:
        """A span ended; a step's that ``raised`` may run again."""
        self._workflows.pop(span_id, None)
        run = self._open.pop(span_id, None)
        if run is not None and raised:
            root, parent, name, events, number = run
            self._failed.setdefault(root, []).append((parent, name, events, number))

    def forget(self, root: Hashable) -> None:
        """The run of ``root`` ended: its steps run no more."""
        self._failed.pop(root, None)


class Translator:
    """Turns dispatcher spans and events into TraceAssembler calls.

    Kept as spans: the agent run (root, AGENT), workflow steps (CHAIN), tool calls
    (``BaseWorkflowAgent.call_tool`` → TOOL, and ``tool.call``/``acall`` made by a custom
    workflow step → TOOL). LLM calls become LLM spans timed by the ``LLMChatStart/EndEvent``
    pair, or ``LLMCompletionStart/EndEvent`` for a completion (the streaming span itself
    ends before the stream does).
    Spans of LLM and tool internals are folded into their parent.
    """

    def __init__(self, recorder: Recorder, *, session_id: str | None, watch_loops: bool) -> None:
        self.session_id = session_id
        self.assembler = recorder.assembler("llamaindex", watch_loops=watch_loops)
        self._folded: dict[str, str | None] = {}  # folded span → its parent
        # LLM method span → the outermost LLM method around it (itself when none). Methods
        # in one nest make one call to the model (a custom LLM's achat calls its chat, both
        # emitting chat events; predict calls chat or complete, only those emitting any):
        # the first of a nest to start a call records it, and the nest's other events are
        # the same call seen again
        self._model_nests: dict[str, str] = {}
        self._model_calls: dict[str, str] = {}  # nest → the method recording its call
        self._recording: dict[str, str] = {}  # the method recording a call → its nest
        # A streamed call goes on after its methods return, and the methods its stream runs
        # as it is read (a custom LLM's astream_chat reading its stream_complete) start
        # under the reader's span: by the LLM and that span (the nest's own parent) they
        # are found to be the same call
        self._nest_origins: dict[str, tuple[int, str | None]] = {}  # nest → (LLM, parent)
        self._model_streams: dict[tuple[int, str | None], str] = {}  # (LLM, parent) → nest
        self._tool_errors: dict[str, str] = {}
        # call_tool span → why its step was suspended; the run then waits (the assembler
        # holds why) until a step of it ends again (the suspended step runs again once its
        # event comes)
        self._suspended: dict[str, str] = {}
        # tools a workflow step called itself (tool.acall(...)), not through an agent's call_tool
        self._direct_tools: set[str] = set()
        # LLM methods shaping an answer into a schema (output_cls, structured_predict): the
        # LLM "calls" the schema as a tool, which is no tool call of the agent
        self._structured: set[str] = set()
        # spans inside a tool's span: a workflow a tool ran there (an agent called as a
        # tool) is an agent of its own, whose turns are not the outer run's
        self._in_tool: set[str] = set()
        # A streamed answer (a query engine's): the spans that returned one, the spans one
        # is still being read under (how many), the exits that wait for them (the run's
        # root among them), and the text of the answers read under each
        self._answer_streams: set[str] = set()  # spans that returned one, not read yet
        self._answers_read_under: dict[str, int] = {}
        self._waiting_exits: dict[str, tuple[Any, float]] = {}
        self._answer_texts: dict[str, str] = {}
        # roots of runs resumed from a saved context: their steps show what they go on from
        self._resumed: set[str] = set()
        self._agents: dict[Any, str] = {}  # run's root span → the workflow agent running now
        # run's root span → the agent span that the running agent's steps nest under
        self._agent_spans: dict[Any, str] = {}
        self._retries = StepRetries()

    def refuser(self, span_id: str, call: ToolCall) -> Callable[[AlertEvent], None]:
        """What the recorder calls, in order with the events, to mark a refused call
        (``call`` as the agent asked for it: the guard renames the request to refuse it)."""

        def refuse(event: AlertEvent) -> None:
            self.assembler.refuse(span_id, event.alert, call=call)

        return refuse

    def _parent(self, parent_id: str | None) -> str | None:
        while parent_id is not None and parent_id in self._folded:
            parent_id = self._folded[parent_id]
        return parent_id

    # the events' handlers, on the recorder's thread
    def on_start(self, e: SpanStarted) -> None:
        self._start(e.span_id, e.parent_id, e.instance, e.bound_args, e.tags, e.at)

    def on_exit(self, e: SpanExited) -> None:
        self._exit(e.span_id, e.result, e.at)

    def on_drop(self, e: SpanDropped) -> None:
        self._drop(e.span_id, e.error, e.at)

    def on_streaming(self, e: Streaming) -> None:
        self._answer_streams.add(e.span_id)
        for key in self._ancestors(e.span_id):
            self._answers_read_under[key] = self._answers_read_under.get(key, 0) + 1

    def _ancestors(self, key: str) -> list[str]:
        """``key``'s enclosing spans in the trace, innermost first."""
        found = []
        above = self.assembler.parent_key(key)
        while above is not None:
            found.append(str(above))
            above = self.assembler.parent_key(above)
        return found

    def _answer_read(self, above: list[str], text: str | None, error: BaseException | None) -> None:
        """A stream returned under the spans ``above`` (innermost first) was read: the exits
        that waited for it go on (with the stream's error, when reading it failed)."""
        for key in above:
            left = self._answers_read_under.get(key, 0) - 1
            if left > 0:
                self._answers_read_under[key] = left
                continue
            self._answers_read_under.pop(key, None)
            if text is not None:
                self._answer_texts[key] = text
            waiting = self._waiting_exits.pop(key, None)
            if waiting is None:
                continue
            result, at = waiting
            if error is not None:
                self._drop(key, error, at)
            else:
                self._exit(key, result, at)

    def on_event(self, e: Instrumented) -> None:
        self._event(e.event, e.at, e.said)

    def _start(
        self,
        span_id: str,
        parent_id: str | None,
        instance: Any,
        bound_args: Any,
        tags: dict[str, Any] | None,
        at: float,
    ) -> None:
        name = _name(span_id)
        arguments = bound_args.arguments if bound_args is not None else {}
        parent = self._parent(parent_id)
        if "ev" in arguments and parent is not None and self.assembler.is_root(parent):
            self.assembler.stop_waiting(parent)  # the workflow's next step: it goes on
            answer = _human_answer(arguments["ev"])
            if answer is not None:
                self.assembler.human_answered(
                    parent, plain(answer), resumed=parent in self._resumed
                )
            if parent in self._resumed:
                self._resumed_step(parent, arguments["ev"], answer)
        in_tool = parent is not None and (parent in self._in_tool or self._is_tool(parent))
        if in_tool:
            self._in_tool.add(span_id)
        agent = getattr(arguments.get("ev"), "current_agent_name", None)
        if (
            agent
            and not in_tool
            and parent is not None
            and self.assembler.trace_of(parent) is not None
        ):
            self._switch_agent(str(agent), parent, at)
        parent = self._agent_spans.get(parent, parent)  # a workflow agent's steps nest under it
        tags = tags or {}
        session = tags.get(SESSION_TAG) or self.session_id or tags.get("session_id")
        if isinstance(instance, BaseLLM) and (
            "structured" in name.lower() or parent_id in self._structured
        ):
            self._structured.add(span_id)
        if (
            name.endswith("_prepare_chat_with_tools")
            and parent is not None
            and parent_id not in self._structured
        ):
            self.assembler.annotate(parent, tools=_tool_specs(arguments.get("tools")))
        if isinstance(instance, BaseTool) and parent_id in self._structured:
            self._folded[span_id] = parent  # the schema as a tool: the LLM span has the answer
            return
        if isinstance(instance, BaseTool) and self._called_directly(parent):
            self._start_direct_tool(span_id, parent, instance, arguments, session, at)
            return
        if isinstance(instance, StreamingAgentChatResponse):
            # a streamed chat answer storing itself in the memory, on a thread of its own
            # as the caller reads it: the answer's bookkeeping, which can outlive the run
            self._folded[span_id] = parent
            return
        if isinstance(instance, BaseLLM | BaseTool):
            # LLM calls are timed by their events, tool calls by call_tool: fold internals
            self._folded[span_id] = parent
            if isinstance(instance, BaseLLM):
                self._join_nest(span_id, parent_id, instance)
            return
        call = requested_call(name, arguments)
        if (
            isinstance(instance, BaseRetriever)
            and name.endswith(RETRIEVALS)
            and parent is not None
            and self.assembler.trace_of(parent) is not None
        ):
            self.assembler.start_span(
                span_id,
                parent,
                SpanKind.RETRIEVER,
                name,
                input=plain(_user_message(arguments)),
                start_time=at,
                session_id=session,
                attributes=self._agent_of(parent),
            )
        elif call is not None:
            # made JSON-safe here, off the agent's thread (the guard's check there reads the
            # arguments as they are)
            call.arguments = plain(call.arguments)
            self._start_tool(span_id, parent, call, session, at)
            # the call a run stopped in runs now: in a run resumed from its saved context,
            # that run's request and trace; in the same run, nothing to keep
            paused = self.assembler.take_unfinished((WAITING_IN_TOOL, call.id))
            root = self.assembler.root_key(span_id)
            if paused is not None and root in self._resumed:
                self.assembler.annotate(root, metadata={RESUMES_TRACE_ID: paused.trace_id})
                self.assembler.request_found(root, lambda: paused.request)
        elif (
            parent is None
            or self.assembler.trace_of(parent) is None
            or (self._is_tool(parent) and name.endswith(".run"))
        ):
            # a run, or a workflow a tool ran (an agent called as a tool: an agent of the
            # run, inside the tool, named after the agent)
            root = parent is None or self.assembler.trace_of(parent) is None
            if root and _resumes(arguments):
                self._resumed.add(span_id)
            named = None if root else getattr(instance, "name", None)
            self.assembler.start_span(
                span_id,
                None if root else parent,
                SpanKind.AGENT,
                name,
                input=plain(_user_message(arguments)),
                start_time=at,
                session_id=session,
                # the agent's own tools (a ReAct agent never binds them to its LLM)
                tools=_tool_specs(getattr(instance, "tools", None)) if root else None,
                attributes={AGENT_NAME: named} if isinstance(named, str) and named else None,
            )
            self._retries.workflow_started(span_id, instance)
        else:
            attributes = self._agent_of(parent)
            if name in BOOKKEEPING_STEPS:
                attributes[INTERNAL_CALL] = True
            if parent is not None:
                above = [parent, *self._ancestors(parent)]
                step = self._retries.step(span_id, above, name, arguments)
                if step is not None:
                    attributes[GRAPH_STEP] = step
            self.assembler.start_span(
                span_id,
                parent,
                SpanKind.CHAIN,
                name,
                start_time=at,
                session_id=session,
                attributes=attributes,
            )

    def _resumed_step(self, root: str, event: Any, answer: Any) -> None:
        """A step of a run resumed from a saved context (started with no request): the
        request its event carries, else the human's answer it takes up (when no request is
        known, the answer is all there is)."""
        self.assembler.request_found(root, lambda: _request_in(event))
        if answer is not None:
            self.assembler.request_found(root, lambda: plain(answer))

    def _is_tool(self, key: str | None) -> bool:
        return self._kind_of(key) is SpanKind.TOOL

    def _is_agent(self, key: str | None) -> bool:
        return self._kind_of(key) is SpanKind.AGENT

    def _kind_of(self, key: str | None) -> SpanKind | None:
        span = self.assembler.span_of(key) if key is not None else None
        return span.kind if span is not None else None

    def _called_directly(self, parent: str | None) -> bool:
        """Whether a tool span under ``parent`` is a call a workflow step made itself: inside
        a run, not under an agent's ``call_tool`` (which records the call) nor another tool."""
        return (
            parent is not None
            and self.assembler.trace_of(parent) is not None
            and not _name(parent).endswith("call_tool")
            and parent not in self._direct_tools
        )

    def _start_tool(
        self, span_id: str, parent: str | None, call: ToolCall, session: str | None, at: float
    ) -> None:
        self.assembler.start_span(
            span_id,
            parent,
            SpanKind.TOOL,
            call.name,
            input=call.arguments,
            start_time=at,
            session_id=session,
            tool_call=call,
            attributes=self._agent_of(parent),
        )

    def _start_direct_tool(
        self,
        span_id: str,
        parent: str | None,
        tool: BaseTool,
        arguments: dict[str, Any],
        session: str | None,
        at: float,
    ) -> None:
        call = _direct_call(tool, arguments)
        self._direct_tools.add(span_id)
        self._start_tool(span_id, parent, call, session, at)
        if not self.assembler.watch_loops:
            # the guard checks an agent's calls before they run; a step's own call cannot be
            # refused, so the guard watches it as it does without stop_on_loop (alerts only)
            self.assembler.watch(span_id, call, started=at)

    def _switch_agent(self, agent: str, parent: Any, at: float) -> None:
        """An AgentWorkflow step names the agent it runs for: when that agent changes, end the
        previous agent's span and open one for this agent, under the run's root."""
        root = self.assembler.root_key(parent)
        if root is None or self._agents.get(root) == agent:
            return
        previous = self._agent_spans.pop(root, None)
        if previous is not None:
            self.assembler.end_span(previous, end_time=at)
        self._agents[root] = agent
        key = f"agent:{root}:{agent}:{at}"
        self.assembler.start_span(
            key, root, SpanKind.AGENT, agent, start_time=at, attributes={AGENT_NAME: agent}
        )
        self._agent_spans[root] = key

    def _end_agent(self, root: Any, at: float) -> None:
        """The run of ``root`` ends: so does the span of the agent running in it."""
        self._resumed.discard(root)
        self._retries.forget(root)
        self._agents.pop(root, None)
        span = self._agent_spans.pop(root, None)
        if span is not None:
            self.assembler.end_span(span, end_time=at)

    def _agent_of(self, key: str | None) -> dict[str, Any]:
        """``gen_ai.agent.name`` of the agent a span under ``key`` runs for: the nearest
        agent run inside the run above it (an agent a tool runs), else the AgentWorkflow
        agent running in the trace of ``key``."""
        root = self.assembler.root_key(key) if key is not None else None
        above: Hashable | None = key
        while above is not None and above != root:
            span = self.assembler.span_of(above)
            if span is None:
                break
            if span.kind is SpanKind.AGENT and span.attributes.get(AGENT_NAME):
                return {AGENT_NAME: span.attributes[AGENT_NAME]}
            above = self.assembler.parent_key(above)
        agent = self._agents.get(root) if root is not None else None
        return {AGENT_NAME: agent} if agent else {}

    def _exit(self, span_id: str, result: Any, at: float) -> None:
        if self._answers_read_under.get(span_id):  # a stream is still read under it
            self._waiting_exits[span_id] = (result, at)
            return
        streamed = self._answer_texts.pop(span_id, None)
        if _is_stream(result):  # never read here: the caller reads it; its text, if read
            result = streamed
        if span_id in self._answer_streams:  # the stream it returned was read: its text
            self._answer_streams.discard(span_id)
            above = self._ancestors(span_id)
            self._exit(span_id, result, at)
            self._answer_read(above, result, None)
            return
        self._in_tool.discard(span_id)
        self._structured.discard(span_id)
        self._leave_nest(span_id)
        # the streams read in a span are over when it ends (one left unread included)
        self._end_model_streams(lambda origin, _: origin[1] == span_id)
        if self._folded.pop(span_id, "unset") != "unset":
            return
        self._retries.end(span_id, raised=False)
        name = _name(span_id)
        if span_id in self._direct_tools:
            self._direct_tools.discard(span_id)
            error = getattr(result, "content", None) if getattr(result, "is_error", False) else None
            content = getattr(result, "content", result)
            self.assembler.end_span(span_id, output=plain(content), error=error, end_time=at)
        elif name.endswith("call_tool") and span_id in self._suspended:
            # a step waiting for an event: not a call yet (it runs again when the event
            # comes), and a run that stops here was paused, not failed
            self.assembler.wait(span_id, self._suspended.pop(span_id))
            waiting = self.assembler.span_of(span_id)
            if waiting is not None and waiting.tool_call is not None:
                # a run stopped here goes on from its saved context with this call
                self.assembler.keep_unfinished((WAITING_IN_TOOL, waiting.tool_call.id), span_id)
            self.assembler.discard_span(span_id)
        elif name.endswith("call_tool"):
            self.assembler.stop_waiting(span_id)
            output = getattr(result, "tool_output", None)
            content, flagged = tool_returned(result)
            error = self._tool_errors.pop(span_id, None) or flagged
            if _refused_handoff(output, content):
                error = error or str(content)  # no error flag: the agent stays in control
            not_run = {TOOL_NOT_RUN: True} if _no_such_tool(output) else None
            self.assembler.end_span(
                span_id, output=content, error=error, end_time=at, attributes=not_run
            )
        elif self.assembler.is_root(span_id):
            self._end_agent(span_id, at)
            self.assembler.stop_waiting(span_id)
            self.assembler.end_span(span_id, output=_output_text(result), end_time=at)
        elif self._is_agent(span_id):  # a workflow a tool ran: its answer
            self.assembler.end_span(span_id, output=_output_text(result), end_time=at)
        elif self._kind_of(span_id) is SpanKind.RETRIEVER:
            found: list[dict[str, Any]] = self.assembler.field(
                "the retrieved documents", lambda: _documents(result), []
            )
            self.assembler.end_span(span_id, output=found, end_time=at)
        else:
            asked = _input_asked(result)
            if asked is not None:  # a step asked a human: the run waits for the answer
                self.assembler.wait(span_id, asked[0], question=asked[1])
            self.assembler.end_span(span_id, end_time=at)

    def _drop(self, span_id: str, error: BaseException | None, at: float) -> None:
        if span_id in self._answer_streams:  # reading the stream it returned failed
            self._answer_streams.discard(span_id)
            above = self._ancestors(span_id)
            self._drop(span_id, error, at)
            self._answer_read(above, None, error)
            return
        self._in_tool.discard(span_id)
        message = error_text(error) if error is not None else "dropped"
        self._structured.discard(span_id)
        self._end_model_streams(lambda origin, _: origin[1] == span_id)
        self._direct_tools.discard(span_id)
        if self._leave_nest(span_id) and span_id not in self._recording:
            self._folded.pop(span_id, None)  # the method recording the call has the error
            return
        parent = self._folded.pop(span_id, "unset")
        if parent != "unset":
            # a tool's own span dropped: the error belongs to its call_tool span, unless
            # the tool only waits for an event
            if parent is not None and _name(parent).endswith("call_tool"):
                waiting = _waiting_reason(error)
                if waiting is not None:
                    self._suspended[parent] = waiting
                else:
                    self._tool_errors[parent] = message
            # an LLM call that failed: its span (opened by its start event) gets the
            # provider's error, since no end event will come
            if self._ends_call(span_id):
                self.assembler.end_span(("llm", span_id), error=message, end_time=at)
            return
        if self.assembler.is_root(span_id):
            self._end_agent(span_id, at)
            ended = limit_or_timeout(type(error).__name__, str(error)) if error else None
            if ended is not None:
                self.assembler.mark(span_id, ended, message)
            waiting = self.assembler.stop_waiting(span_id)
            if waiting is not None:  # stopped while it waited for an event: paused
                self.assembler.mark(span_id, RunStatus.INTERRUPTED, waiting)
        self._retries.end(span_id, raised=isinstance(error, Exception))
        if error is None:
            self.assembler.end_span(span_id, error=message, end_time=at)
        else:  # a run whose task its caller cancelled is cancelled, event or no event
            self.assembler.fail_span(span_id, error, end_time=at)

    def _event(self, event: Any, at: float, said: str | None) -> None:
        if type(event).__name__ == "SpanCancelledEvent":  # the run's caller cancelled it
            key = self._parent(event.span_id)
            if key is None:
                return
            waiting = self.assembler.stop_waiting(key)
            if waiting is not None:  # stopped while it waited for an event (a human): paused
                self.assembler.mark(key, RunStatus.INTERRUPTED, waiting)
            else:
                self.assembler.mark(key, RunStatus.CANCELLED, CANCELLED_BY_CALLER)
        elif isinstance(event, LLMChatStartEvent | LLMCompletionStartEvent):
            if self._starts_call(event.span_id):
                self._model_start(event, at)
        elif isinstance(event, LLMChatEndEvent | LLMCompletionEndEvent) and self._ends_call(
            event.span_id
        ):
            self._model_end(event, at, said)

    def _starts_call(self, method: str | None) -> bool:
        """Whether LLM method ``method``'s start event records a call to the model: its nest
        records none yet (else it is the same call, seen again from inside)."""
        if method is None:  # an event outside any span: nothing else records its call
            return True
        nest = self._model_nests.get(method, method)
        if self._model_calls.setdefault(nest, method) != method:
            return False
        self._recording[method] = nest
        return True

    def _ends_call(self, method: str | None) -> bool:
        """Whether ``method`` recorded a call to the model (which ends now)."""
        if method is None:
            return True
        nest = self._recording.pop(method, None)
        if nest is None:
            return False
        if self._model_calls.get(nest) == method:
            del self._model_calls[nest]
        self._end_model_streams(lambda _, streamed: streamed == nest)
        return True

    def _join_nest(self, method: str, parent_id: str | None, llm: BaseLLM) -> None:
        """Put LLM method ``method`` in the nest of the LLM method it runs in, or of the
        streamed call of the same LLM its caller is reading, else in a nest of its own."""
        nest = self._model_nests.get(parent_id) if parent_id is not None else None
        if nest is None:
            origin = (id(llm), parent_id)
            nest = self._model_streams.get(origin)
            if nest is None:
                nest = method
                self._nest_origins[method] = origin
        self._model_nests[method] = nest

    def _leave_nest(self, method: str) -> bool:
        """Forget LLM method ``method`` as it returns or raises; whether it was one. A
        stream's end event comes after its methods returned: the nest's call stays open,
        and the methods its stream runs join it."""
        nest = self._model_nests.pop(method, None)
        if nest == method:
            origin = self._nest_origins.pop(method, None)
            if self._model_calls.get(method) not in self._recording:
                self._model_calls.pop(method, None)
            elif origin is not None:
                self._model_streams[origin] = method
        return nest is not None

    def _end_model_streams(self, ended: Callable[[tuple[int, str | None], str], bool]) -> None:
        """Forget the streamed calls ``ended(origin, nest)`` says are over."""
        if self._model_streams:
            for origin in [o for o, nest in self._model_streams.items() if ended(o, nest)]:
                del self._model_streams[origin]

    def _model_start(self, event: LLMChatStartEvent | LLMCompletionStartEvent, at: float) -> None:
        """A call to the model: a chat (messages), or a completion of a prompt (what a query
        engine's answer is on a model that is no chat model)."""
        parent = self._parent(event.span_id)
        sent: Any = event.prompt if isinstance(event, LLMCompletionStartEvent) else None
        if isinstance(event, LLMChatStartEvent):
            messages = event.messages
            sent = self.assembler.field(
                "the messages sent",
                lambda: self.assembler.messages(parent, list(messages), _messages),
                None,
            )
            stopped = self.assembler.field(
                "the early stop", lambda: _early_stop(event.messages), None
            )
            if stopped is not None and parent is not None:
                self.assembler.mark(parent, RunStatus.LIMIT, stopped)
        model = _model_name(event.model_dict or {})
        self.assembler.start_span(
            ("llm", event.span_id),
            parent,
            SpanKind.LLM,
            str(model or "llm"),
            input=sent,
            start_time=at,
            attributes={
                OPERATION_NAME: "text_completion"
                if isinstance(event, LLMCompletionStartEvent)
                else "chat",
                REQUEST_MODEL: model,
                **self._agent_of(parent),
            },
        )

    def _model_end(
        self, event: LLMChatEndEvent | LLMCompletionEndEvent, at: float, said: str | None
    ) -> None:
        # the span ends whatever the response holds: each part under its own guard
        field = self.assembler.field
        requested: list[ToolCall] = []
        thought = reasoning = None
        if isinstance(event, LLMCompletionEndEvent):  # a completion asks for no tools
            text = field("the completion", lambda: str(event.response.text or ""), "")
        else:
            message = event.response.message if event.response is not None else None
            requested = field("the requested tool calls", lambda: _native_calls(message), [])
            if said is None:  # not read as the event came (a response it could not read)
                said = field("the reply's text", lambda: _message_text(message), "")
            text = said
            reasoning = field("the reasoning", lambda: _reasoning(message), None)
            thought = text if requested else None
            if not requested:  # a ReAct agent asks for its tools in text
                thought, requested = react_actions(text)
            if requested:
                thought = step_thought(reasoning, thought)
        attributes: dict[str, Any] = field("the token usage", lambda: _usage(event.response), {})
        if reasoning:
            attributes[REASONING] = reasoning
        finished: list[str] = field("the finish reason", lambda: _finish_reason(event.response), [])
        if finished:  # a reply cut at the token limit makes the run a limit
            attributes[FINISH_REASONS] = finished
        refused = (
            None
            if text or requested
            else field("the refusal", lambda: _refusal(event.response), None)
        )
        if refused is not None:  # the reply is what the provider said in its place
            attributes[REFUSAL] = text = refused
        self.assembler.end_span(
            ("llm", event.span_id),
            output=text,
            end_time=at,
            attributes=attributes,
            requested_tool_calls=requested,
            thought=thought,
        )
