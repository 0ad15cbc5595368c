"""LangChain events → core spans. Runs on the event pump's thread, never the agent's."""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Iterator
from typing import Any, NamedTuple
from uuid import UUID

from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from agenteval_core import (
    AGENT_NAME,
    CONTROL_FLOW,
    GRAPH_STEP,
    HANDOFF_TARGET,
    INTERNAL_CALL,
    PROVIDER_TOOL,
    REASONING,
    REFUSAL,
    TOOL_NOT_RUN,
    RunStatus,
    Span,
    SpanKind,
    ToolCall,
    ToolSpec,
    plain,
    text_of,
)
from agenteval_core.recording import (
    CLASSIC_STOPS,
    FINISH_REASONS,
    INPUT_TOKENS,
    OPERATION_NAME,
    OUTPUT_TOKENS,
    PROVIDER_NAME,
    REQUEST_MODEL,
    RESUME,
    RESUME_QUESTIONS,
    RESUMES_TRACE_ID,
    UNPARSED_REPLY,
    AlertEvent,
    Recorder,
    TaskSteps,
    Unfinished,
    error_text,
    limit_or_timeout,
    resume_questions,
    step_thought,
    unreadable_call,
)

__all__ = ["SESSION_KWARG", "Event", "Translator", "chain_name", "jsonable", "task_step"]


SESSION_KEYS = ("session_id", "thread_id", "conversation_id")

LANGCHAIN_INTERNAL_CALL = "lc_internal_call"
"""The run metadata key LangChain's middleware (summarisation, tool selection, tool
emulation) marks its own model calls with (``internal_call_metadata()``, public for
third-party middleware): they are no steps of the agent."""

_STRUCTURED_RESPONSE_NODE = "generate_structured_response"
"""The node of LangGraph's ``create_react_agent(response_format=...)`` that asks the model
once more, after the agent's loop, for its answer in the schema: no step of the agent."""

MIDDLEWARE_HOOKS = (".before_agent", ".before_model", ".after_model", ".after_agent")
"""How the nodes of ``create_agent``'s middleware hooks end (``<middleware>.before_model``):
the agent's own model calls run in its ``model`` node, so a model call in a hook (a guard
asking a model whether a request is safe, ``ModelRouterMiddleware`` choosing the model) is
the middleware's, no step of the agent."""

_DECISION_MODEL_RUN = "llm"
"""The ``run_type`` of a decision model's run (``langchain_core.decisions``: a classifier
a middleware asks, as ``AutoModeMiddleware`` asks whether a tool call is risky), the one
run that is a model call without being a chat model's: no step of the agent."""

_TOOL_EMULATION = "tool_emulation"
"""The run metadata `lc_source` of the model call LLMToolEmulator answers a tool call with."""

TOOL_EMULATED = "agenteval.tool.emulated"
"""Span attribute set to ``True`` on a tool call a model answered in the tool's place
(``LLMToolEmulator``, for testing an agent without its tools): the tool never ran."""

SESSION_KWARG = "agenteval_session"
"""Where a root run's event carries the session of ``agenteval_core.session(...)``."""


def _message(value: Any) -> Any:
    """A LangChain message as role and content (with its tool calls); other objects as they
    are, for :func:`~agenteval_core.plain` to convert."""
    if not isinstance(value, BaseMessage):
        return value
    message: dict[str, Any] = {"role": value.type, "content": value.content}
    tool_calls = getattr(value, "tool_calls", None)
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def jsonable(value: Any) -> Any:
    """A JSON-friendly copy of LangChain inputs and outputs (messages become role/content),
    made with bounded work whatever the value holds (see :func:`~agenteval_core.plain`)."""
    return plain(value, _message)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(
            block.get("text", "") if isinstance(block, dict) else str(block) for block in content
        )
    return "" if content is None else str(content)


def refusal(message: Any) -> str | None:
    """The provider's explicit refusal in a model's reply that has no text (LangChain's
    standard refusal block: OpenAI's refusal field, Anthropic's refusal stop reason, a
    Gemini safety stop): its text, ``""`` when the provider gave none; else ``None``."""
    if not isinstance(message, BaseMessage) or _text(message.content):
        return None
    for block in message.content_blocks:  # translated per provider: only for a silent reply
        if isinstance(block, dict) and block.get("type") == "refusal":
            return str(block.get("refusal") or "")
    return None


_ROLE_NAMES = {"human": ("human", "user"), "ai": ("ai", "assistant")}
"""A message type's names in a message given as a dict or a tuple (``("user", "Hi")``)."""


def conversation_text(value: Any, role: str) -> Any:
    """For a conversation, the text of its last message of ``role`` (an AI message that
    refused: its refusal): a LangGraph state (``{"messages": [...]}``), a list of messages
    (what a functional-API ``@entrypoint`` agent is given), or one message (what it
    answers). Anything else, or a conversation without such a message, unchanged."""
    if isinstance(value, dict) and "messages" in value:
        messages = value["messages"]
    elif isinstance(value, BaseMessage):
        messages = [value]
    else:
        messages = value
    if not isinstance(messages, list):
        return value
    names = _ROLE_NAMES.get(role, (role,))
    for message in reversed(messages):
        if isinstance(message, BaseMessage) and message.type == role:
            return _text(message.content) or refusal(message) or ""
        if isinstance(message, dict) and message.get("role") in names and "content" in message:
            return _text(message["content"])
        if isinstance(message, tuple) and len(message) == 2 and message[0] in names:
            return _text(message[1])
    return value


def answer_text(value: Any, last_asked: Container[str]) -> Any:
    """A run's answer in its final conversation: the text of its last AI message, or, when
    the conversation ends with the message of a tool the run's last model call asked for
    (``last_asked``: those calls' ids), that message's: a tool made with
    ``return_direct=True`` ends the run with its result, which is the answer (the AI
    message before it only asked for the call). Anything else as :func:`conversation_text`
    reads it."""
    messages = value.get("messages") if isinstance(value, dict) else value
    last = messages[-1] if isinstance(messages, list) and messages else None
    if isinstance(last, ToolMessage) and last.tool_call_id in last_asked:
        return _text(last.content)
    return conversation_text(value, "ai")


def _state_summary(value: Any) -> Any:
    """Inner LangGraph nodes pass the whole conversation state in and out; the LLM and tool
    spans already hold what matters, so a node span keeps only the message count and the
    last message (copying every state on every node would grow quadratically)."""
    messages = value.get("messages") if isinstance(value, dict) else None
    if isinstance(messages, list) and messages:
        return {"messages": len(messages), "last": messages[-1]}
    return value


def _limit_reached(name: str, output: Any) -> str | None:
    """What a call-limit middleware (``ModelCallLimitMiddleware``,
    ``ToolCallLimitMiddleware``) said when its hook ``name`` ended the run at its limit
    (``exit_behavior="end"``, the default: the run ends with a message of its own, which
    read as the agent's answer to a run that completed), else None."""
    if "CallLimitMiddleware." not in name or not isinstance(output, dict):
        return None
    if output.get("jump_to") != "end":
        return None
    messages = output.get("messages") or []
    said = _text(getattr(messages[-1], "content", "")) if messages else ""
    return said or f"{name.split('.')[0]} ended the run at its limit"


OUT_OF_STEPS = "Sorry, need more steps to process this request."
"""What LangGraph's ``create_react_agent`` answers in place of its model's reply when the
run has too few steps left of its ``recursion_limit`` to call a tool: the run ends there,
without the recursion error, as if it had answered."""


def _last_ai_text(output: Any) -> str | None:
    """The text of a graph state's last message, when it is the AI's."""
    messages = output.get("messages") if isinstance(output, dict) else None
    last = messages[-1] if isinstance(messages, list) and messages else None
    return _text(last.content) if last is not None and getattr(last, "type", None) == "ai" else None


def tools_offered(invocation_params: dict[str, Any] | None) -> list[ToolSpec]:
    """The tools a model call was offered, from its ``invocation_params``."""
    return [
        ToolSpec(
            name=function["name"],
            description=function.get("description", ""),
            parameters=function.get("parameters"),
        )
        for function in _functions_offered(invocation_params)
    ]


def names_offered(invocation_params: dict[str, Any] | None) -> set[str]:
    """The names of the tools a model call was offered (on the agent's thread: no specs)."""
    return {function["name"] for function in _functions_offered(invocation_params)}


def _functions_offered(invocation_params: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    for tool in (invocation_params or {}).get("tools") or []:
        function = tool.get("function", tool) if isinstance(tool, dict) else {}
        if function.get("name"):
            yield function


_UNNAMED_GRAPH = "LangGraph"
"""What LangGraph calls a graph compiled without a name."""


def graph_is_agent(name: str, in_tool: bool) -> bool:
    """Whether a graph run inside a run is an agent: one with a name of its own
    (``create_agent(name=...)``, a supervisor's worker), or any graph a tool runs."""
    return name != _UNNAMED_GRAPH or in_tool


_INTERNAL_METADATA = ("langgraph_", "checkpoint_", "ls_", "__")


def graph_step(tags: Any) -> int | None:
    """The step of its graph a run is a task of (LangGraph tags a node's run
    ``graph:step:<n>``, and no run below it), else ``None``."""
    for tag in tags or ():
        if str(tag).startswith("graph:step:"):
            number = str(tag)[len("graph:step:") :]
            return int(number) if number.isdigit() else None
    return None


def chain_name(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """A chain run's name, from what its start callback was given."""
    serialized = args[0] if args else None
    return kwargs.get("name") or (serialized or {}).get("name") or "chain"


def task_step(
    steps: TaskSteps, run: Any, parent: Any, name: str, metadata: dict[str, Any], inputs: Any
) -> int | None:
    """The step (:class:`TaskSteps`) of the chain run ``run`` (``name``) starting under ``parent``
    when it is a task the functional API called (an ``@task`` an ``@entrypoint`` calls:
    its ``langgraph_path`` is ``("__pregel_push", <caller's path>, <index>, True)``, and
    LangGraph tags no step on it); ``None`` for any other run."""
    path = metadata.get("langgraph_path")
    if (
        parent is None
        or name != metadata.get("langgraph_node")
        or not isinstance(path, tuple)
        or len(path) < 3
        or path[0] != "__pregel_push"
        or path[-1] is not True  # a Send's task: (..., False), its step tagged
    ):
        return None
    return steps.step(parent, name, jsonable(inputs), run)


def run_metadata(metadata: dict[str, Any], tags: Any) -> dict[str, Any]:
    """The run's own metadata and tags (config ``metadata``, ``thread_id``, ``tags``), without
    LangGraph's and LangSmith's bookkeeping keys."""
    kept = {
        str(key): jsonable(value)
        for key, value in metadata.items()
        if not str(key).startswith(_INTERNAL_METADATA)
    }
    if tags:
        kept["tags"] = [str(tag) for tag in tags]
    return kept


def control_flow(error: BaseException) -> str | None:
    """``interrupt`` or ``handoff`` for LangGraph's control-flow exceptions, else None."""
    names = {cls.__name__ for cls in type(error).__mro__}
    if "GraphBubbleUp" not in names:
        return None
    return "interrupt" if "GraphInterrupt" in names else "handoff"


def _goto(command: Any) -> dict[str, Any]:
    """Where a LangGraph ``Command`` sends the graph next (a handoff), as span attributes."""
    goto = getattr(command, "goto", None)
    return {HANDOFF_TARGET: jsonable(goto)} if goto else {}


def _command_reply(command: Any, call_id: str | None) -> tuple[Any, dict[str, Any]]:
    """What the model is shown of a tool's ``Command(update={"messages": [ToolMessage(...)],
    ...})``: the tool message that answers the call (by its id, else the only one), whose
    text, status and artifact are the call's as a tool message's are (a command without one
    stays as it is); and where the command sends the graph next, as span attributes."""
    update = getattr(command, "update", None)
    pairs = list(update.items()) if isinstance(update, dict) else update
    messages: list[Any] = []
    for pair in pairs if isinstance(pairs, list | tuple) else ():
        if isinstance(pair, tuple) and len(pair) == 2 and pair[0] == "messages":
            value = pair[1]
            messages.extend(value if isinstance(value, list | tuple) else [value])
    replies = [m for m in messages if isinstance(m, ToolMessage)]
    answering = [m for m in replies if m.tool_call_id == call_id] or (
        replies if len(replies) == 1 else []
    )
    return (answering[-1] if answering else command), _goto(command)


def tool_returned(output: Any, call_id: str | None) -> tuple[Any, str | None]:
    """What a tool's run gave its model, as the trace records it: the result (a tool
    message's content, of a ``Command`` the tool message that answers call ``call_id``) and
    the error a tool message with status "error" says."""
    if type(output).__name__ == "Command":
        output = _command_reply(output, call_id)[0]
    return _message_returned(output)


def _message_returned(output: Any) -> tuple[Any, str | None]:
    """A tool's output once a ``Command`` is read: a tool message's content, and its text as
    the error when its status is "error"; any other output as it is."""
    if isinstance(output, ToolMessage):
        error = _text(output.content) if output.status == "error" else None
        return jsonable(output.content), error
    return jsonable(output), None


def _session(metadata: dict[str, Any] | None) -> str | None:
    if not metadata:
        return None
    for key in SESSION_KEYS:
        if metadata.get(key):
            return str(metadata[key])
    return None


class Event(NamedTuple):
    """One LangChain callback, as the handler puts it on the pump: the translator method
    that handles it, then what the callback was given."""

    handle: Callable[[Event], None]
    run_id: UUID
    parent_run_id: UUID | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    at: float


def _summary(artifact: Any) -> str:
    """A tool artifact (a dataframe, an image, raw records) in a line: its type and size, and
    the start of its text."""
    text = text_of(jsonable(artifact))
    head = text if len(text) <= 200 else f"{text[:200]}…"
    return f"{type(artifact).__name__}, {len(text):,} characters: {head}"


_TOKEN_DETAILS = {
    ("input_token_details", "cache_read"): "gen_ai.usage.cache_read.input_tokens",
    ("input_token_details", "cache_creation"): "gen_ai.usage.cache_creation.input_tokens",
    ("output_token_details", "reasoning"): "gen_ai.usage.reasoning.output_tokens",
}


def _token_details(usage: Any) -> dict[str, int]:
    """Cached and reasoning tokens, where the provider reports them (parts of the input and
    output counts, not additions to them)."""
    details = {}
    for (group, key), attribute in _TOKEN_DETAILS.items():
        value = (usage.get(group) or {}).get(key)
        if isinstance(value, int) and value:
            details[attribute] = value
    return details


def first_generation(response: LLMResult) -> Any:
    """The reply of a model call's first prompt (``None`` when it gave none)."""
    return response.generations[0][0] if response.generations and response.generations[0] else None


def _reply_text(generation: Any) -> str:
    if isinstance(generation, ChatGeneration):
        return _text(generation.message.content)
    return _text(getattr(generation, "text", "")) if generation is not None else ""


def _blocks(message: BaseMessage | None) -> list[dict[str, Any]]:
    """A reply's content as LangChain's standard content blocks, which read each provider's
    own (Anthropic's thinking and server tool blocks, OpenAI's reasoning and built-in tool
    calls) alike."""
    return [dict(block) for block in message.content_blocks] if message is not None else []


def _reasoning(blocks: list[dict[str, Any]]) -> str | None:
    """The reasoning the model gave with its reply (Anthropic's thinking, OpenAI's reasoning
    summaries, ``reasoning_content``); a thinking block from a model that does not say its
    provider is read as is."""
    said = []
    for block in blocks:
        value = block.get("value") if block["type"] == "non_standard" else None
        if block["type"] == "reasoning" and block.get("reasoning"):
            said.append(str(block["reasoning"]))
        elif isinstance(value, dict) and value.get("type") == "thinking" and value.get("thinking"):
            said.append(str(value["thinking"]))
    return "\n\n".join(said) or None


def _provider_calls(blocks: list[dict[str, Any]]) -> list[ToolCall]:
    """The tools the model's provider ran inside the call (a built-in web search, code
    execution: ``server_tool_call`` blocks), each with the ``server_tool_result`` that
    answered it; one that says it failed has its output as its error."""
    answers = {b.get("tool_call_id"): b for b in blocks if b["type"] == "server_tool_result"}
    calls = []
    for block in blocks:
        if block["type"] != "server_tool_call":
            continue
        answer = answers.get(block.get("id")) or {}
        output = jsonable(answer.get("output"))
        failed = answer.get("status") == "error"
        calls.append(
            ToolCall(
                id=block.get("id"),
                name=str(block.get("name") or "provider_tool"),
                arguments=jsonable(dict(block.get("args") or {})),
                result=None if failed else output,
                error=(text_of(output) or "the provider's tool failed") if failed else None,
            )
        )
    return calls


def _finish_reason(message: BaseMessage | None, generation: Any) -> str | None:
    """Why the model stopped, as its provider said (OpenAI's ``finish_reason``, Anthropic's
    ``stop_reason``, Ollama's ``done_reason``; a text model's generation info)."""
    said = getattr(message, "response_metadata", None) or getattr(
        generation, "generation_info", None
    )
    if not isinstance(said, dict):
        return None
    reason = said.get("finish_reason") or said.get("stop_reason") or said.get("done_reason")
    return str(reason) if reason else None


def _tool_node_replies(output: Any) -> list[ToolMessage]:
    """The tool messages a tool node returned (its output holds nothing else; a model
    node's holds the model's message too, beside any answer to its own calls)."""
    messages = output.get("messages") if isinstance(output, dict) else output
    if (
        isinstance(messages, list)
        and messages
        and all(isinstance(m, ToolMessage) for m in messages)
    ):
        return messages
    return []


def _ran_without_ids(spans: list[Span], node: Span) -> list[ToolCall]:
    """The calls run under ``node`` without the id of the request they answer (a tool
    invoked with the arguments alone, its reply made by hand: a functional-API task's
    ``ToolMessage(tool.invoke(call["args"]), tool_call_id=call["id"])``), in order."""
    under = {node.id}
    ran = []
    for span in spans[spans.index(node) + 1 :]:
        if span.parent_id in under:
            under.add(span.id)
            if span.tool_call is not None and span.tool_call.id is None:
                ran.append(span.tool_call)
    return ran


def _run_for(request: ToolCall, ran: list[ToolCall]) -> ToolCall | None:
    """The call in ``ran`` that answers ``request`` (the same tool and arguments, else the
    same tool), taken from ``ran``; ``None`` when none does."""
    same = [call for call in ran if call.name == request.name]
    run = next((call for call in same if call.arguments == request.arguments), None)
    run = run if run is not None else next(iter(same), None)
    if run is not None:
        ran.remove(run)
    return run


def _tool_replies(prompts: Any) -> list[ToolMessage]:
    """The tool messages since the model's last turn, in a chat model's prompt."""
    messages = prompts[0] if prompts and isinstance(prompts[0], list) else []
    replies: list[ToolMessage] = []
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            break
        replies.append(message)
    return replies


def requested_calls(message: BaseMessage | None) -> list[ToolCall]:
    """The tool calls a model's reply asks for."""
    return [
        ToolCall(id=call.get("id"), name=call["name"], arguments=call.get("args") or {})
        for call in getattr(message, "tool_calls", None) or []
    ]


def _usage(message: BaseMessage | None, response: LLMResult) -> dict[str, Any]:
    """Token counts as GenAI attributes: the message's usage metadata, else the provider's
    ``token_usage`` in the response."""
    usage = getattr(message, "usage_metadata", None) or {}
    if usage:
        return {
            INPUT_TOKENS: usage.get("input_tokens", 0),
            OUTPUT_TOKENS: usage.get("output_tokens", 0),
            **_token_details(usage),
        }
    token_usage = (response.llm_output or {}).get("token_usage") or {}
    if token_usage:
        return {
            INPUT_TOKENS: token_usage.get("prompt_tokens", 0),
            OUTPUT_TOKENS: token_usage.get("completion_tokens", 0),
        }
    return {}


class Translator:
    """Turns LangChain callback events into TraceAssembler calls for one handler."""

    def __init__(self, recorder: Recorder, *, session_id: str | None, watch_loops: bool):
        self.session_id = session_id
        self.assembler = recorder.assembler("langchain", watch_loops=watch_loops)
        # run's root → what a call-limit middleware said as it ended (a sub-agent) graph
        self._limits_said: dict[Any, str] = {}
        # open inner runs → the request their input holds, for the one found to be an agent
        self._requests: dict[UUID, Any] = {}
        self._streaming: dict[Any, float] = {}  # LLM run → when its first token came
        # a classic AgentExecutor's run → the tool calls its agent decided on and not yet
        # run (name, call id), and the answer its agent finished with
        self._actions: dict[UUID, list[tuple[str, str | None]]] = {}
        self._answers: dict[UUID, Any] = {}
        self._unparsed: set[UUID] = set()  # its stand-in tool runs for replies that did not parse
        # a tool node → when the model that answered in the tool's place (LLMToolEmulator) began
        self._emulated: dict[UUID, float | None] = {}
        self._task_steps = TaskSteps()
        self.handlers: dict[str, Callable[[Event], None]] = {
            "on_chain_start": self._chain_start,
            "on_chain_end": self._end_output,
            "on_chain_error": self._end_error,
            "on_chat_model_start": self._model_start,
            "on_llm_start": self._model_start,
            "on_llm_new_token": self._first_token,
            "on_llm_end": self._llm_end,
            "on_llm_error": self._end_error,
            "on_tool_start": self._tool_start,
            "on_tool_end": self._tool_end,
            "on_tool_error": self._end_error,
            "on_retriever_start": self._retriever_start,
            "on_retriever_end": self._end_output,
            "on_retriever_error": self._end_error,
            "on_agent_action": self._agent_action,
            "on_agent_finish": self._agent_finish,
        }

    def refuser(
        self, run_id: UUID | None, call: ToolCall | None = None
    ) -> Callable[[AlertEvent], None]:
        """What the recorder calls, in order with the events, to mark a refused tool run
        ``run_id``; or, for a ``call`` no tool runs for (a tool the agent does not have),
        to record it refused under the run ``run_id`` (the model call's node)."""

        def refuse(event: AlertEvent) -> None:
            self.assembler.refuse(run_id, event.alert, call=call)

        return refuse

    @staticmethod
    def arguments(input_str: Any) -> dict[str, Any]:
        """A tool's arguments from the string LangChain passes when it gives no dict."""
        try:
            inputs = json.loads(input_str)
        except (TypeError, ValueError):
            inputs = None
        return inputs if isinstance(inputs, dict) else {"input": input_str}

    def _agent_name(self, e: Event) -> str | None:
        """Whose step a run is: the nearest agent around it (an agent span's name reaches
        every run below it), else the one ``create_agent(name=...)`` names in the run's
        metadata."""
        agent = self.assembler.agent_name_of(e.parent_run_id) or (
            e.kwargs.get("metadata") or {}
        ).get("lc_agent_name")
        return str(agent) if agent else None

    def _internal(self, e: Event, name: str) -> bool:
        """Whether a run is one the framework made for its own ends, inside one or marked
        so (see :data:`LANGCHAIN_INTERNAL_CALL`, :data:`_STRUCTURED_RESPONSE_NODE`,
        :data:`MIDDLEWARE_HOOKS`, :data:`_DECISION_MODEL_RUN`)."""
        if (
            name == _STRUCTURED_RESPONSE_NODE
            or name.endswith(MIDDLEWARE_HOOKS)
            or e.kwargs.get("run_type") == _DECISION_MODEL_RUN
            or LANGCHAIN_INTERNAL_CALL in (e.kwargs.get("metadata") or {})
        ):
            return True
        parent = self.assembler.span_of(e.parent_run_id) if e.parent_run_id else None
        return parent is not None and parent.attributes.get(INTERNAL_CALL) is True

    def _start(self, e: Event, kind: SpanKind, name: str, inputs: Any, **extra: Any) -> None:
        step = graph_step(e.kwargs.get("tags"))
        if step is not None:
            self._graph_found(e.parent_run_id)
        elif kind is SpanKind.CHAIN:
            metadata = e.kwargs.get("metadata") or {}
            step = task_step(self._task_steps, e.run_id, e.parent_run_id, name, metadata, e.args[1])
        if step is not None:
            extra["attributes"] = {**(extra.get("attributes") or {}), GRAPH_STEP: step}
        agent = self._agent_name(e)
        if agent:
            extra["attributes"] = {AGENT_NAME: agent, **(extra.get("attributes") or {})}
        if self._internal(e, name):
            extra["attributes"] = {**(extra.get("attributes") or {}), INTERNAL_CALL: True}
        self.assembler.start_span(
            e.run_id,
            e.parent_run_id,
            kind,
            name,
            input=inputs,
            start_time=e.at,
            session_id=e.kwargs.get(SESSION_KWARG)
            or self.session_id
            or _session(e.kwargs.get("metadata")),
            **extra,
        )

    def _chain_start(self, e: Event) -> None:
        inputs = e.args[1]
        name = chain_name(e.args, e.kwargs)
        root = e.parent_run_id is None or self.assembler.trace_of(e.parent_run_id) is None
        metadata = e.kwargs.get("metadata") or {}
        if not root:
            self._start(e, SpanKind.CHAIN, name, jsonable(_state_summary(inputs)))
            request = conversation_text(inputs, "human")
            if request is not inputs:
                # a run that goes on from a checkpoint (invoke(None, config)) whose
                # earlier run this handler did not see (a fork from an earlier checkpoint,
                # a new process resuming after a crash): its first node is given the
                # thread's state, whose last human message is the request the run answers
                self.assembler.request_found(e.run_id, lambda: jsonable(request))
                if graph_is_agent(name, self._in_tool(e)):
                    self._requests[e.run_id] = request
            return
        resume = getattr(inputs, "resume", None) if type(inputs).__name__ == "Command" else None
        kept = run_metadata(metadata, e.kwargs.get("tags"))
        thread = metadata.get("thread_id")
        request = conversation_text(inputs, "human")
        if name == "AgentExecutor" and isinstance(inputs, dict) and "input" in inputs:
            request = inputs["input"]  # a classic agent's request, beside its chat history
        if resume is not None:
            # a run resumed after an interrupt carries on the paused run's request (the
            # resume value is the human's answer, beside it); linked to the paused trace
            kept[RESUME] = jsonable(resume)
            paused = self.assembler.take_unfinished(thread) if thread is not None else None
            if paused is not None:
                kept[RESUMES_TRACE_ID], request = paused.trace_id, paused.request
                # answers by interrupt id: the ids are new in every run, the questions not
                questions = resume_questions(resume, paused.asked)
                if questions is not None:
                    kept[RESUME_QUESTIONS] = questions
            else:  # its pause was not seen here (another process): its first node is given
                request = None  # the thread's state, whose last human message is the request
        elif thread is not None:
            # taken either way: a new request leaves the thread's unfinished run as it ended
            unfinished = self.assembler.take_unfinished(thread)
            if inputs is None and unfinished is not None:
                # invoke(None, config): the run goes on from the thread's checkpoint, after
                # a failure (LangGraph's durable execution) or a pause, with that request
                kept[RESUMES_TRACE_ID], request = unfinished.trace_id, unfinished.request
        self._start(e, SpanKind.AGENT, name, jsonable(request))
        self.assembler.annotate(e.run_id, metadata=kept)

    def _graph_found(self, run_id: UUID | None) -> None:
        """``run_id`` runs a graph (its steps are LangGraph tasks). An inner graph with a
        name of its own (``create_react_agent(name=...)``, ``create_agent(name=...)``, a
        supervisor's worker), or any graph a tool runs, is an agent: its span becomes an
        agent span with the request it was given, and its own name reaches every run below
        it."""
        request = self._requests.pop(run_id, None) if run_id is not None else None
        span = self.assembler.span_of(run_id) if request is not None else None
        if span is None or span.kind is not SpanKind.CHAIN:
            return
        span.kind, span.input = SpanKind.AGENT, jsonable(request)
        if span.name != _UNNAMED_GRAPH:
            span.attributes[AGENT_NAME] = span.name

    def _in_tool(self, e: Event) -> bool:
        """Whether run ``e`` runs right inside a tool: a graph there, named or not, is an
        agent the tool called (a sub-agent), not a part of the graph that called the tool."""
        parent = self.assembler.span_of(e.parent_run_id) if e.parent_run_id else None
        return parent is not None and parent.kind is SpanKind.TOOL

    def _model_start(self, e: Event) -> None:
        serialized, prompts = e.args
        params = e.kwargs.get("invocation_params") or {}
        metadata = e.kwargs.get("metadata") or {}
        # the model name LangChain reports (ls_model_name), not the chat model's class name
        model = (
            metadata.get("ls_model_name")
            or params.get("model")
            or params.get("model_name")
            or (serialized or {}).get("name")
        )
        # a completion model (LangChain's BaseLLM) is given prompt strings, a chat model
        # a list of messages per prompt
        completion = bool(prompts) and all(isinstance(prompt, str) for prompt in prompts)
        attributes = {
            OPERATION_NAME: "text_completion" if completion else "chat",
            REQUEST_MODEL: model,
        }
        if metadata.get("ls_provider"):
            attributes[PROVIDER_NAME] = metadata["ls_provider"]
        name = str(model or e.kwargs.get("name") or (serialized or {}).get("name") or "llm")
        # a middleware's own call (a tool selector's schema) offers the agent no tool
        internal = self._internal(e, name)
        if metadata.get("lc_source") == _TOOL_EMULATION and e.parent_run_id is not None:
            self._emulated.setdefault(e.parent_run_id, e.at)
        self._start(
            e,
            SpanKind.LLM,
            name,
            [self.assembler.messages(e.parent_run_id, prompts[0], jsonable)]
            if len(prompts) == 1 and isinstance(prompts[0], list)
            else jsonable(prompts),
            attributes=attributes,
            tools=None
            if internal
            else self.assembler.field("the available tools", lambda: tools_offered(params), None),
        )
        # a tool error the graph handled (ToolNode(handle_tool_errors=...)) reached the
        # model as a message: that text is what the call returned to it
        replies: list[ToolMessage] = self.assembler.field(
            "the tool results", lambda: _tool_replies(prompts), []
        )
        for message in replies:
            self.assembler.shown_to_model(e.run_id, message.tool_call_id, _text(message.content))

    def _first_token(self, e: Event) -> None:
        self._streaming.setdefault(e.run_id, e.at)

    def _llm_end(self, e: Event) -> None:
        # the span ends whatever the response holds: each part is read under its own guard
        field = self.assembler.field
        response: LLMResult = e.args[0]
        generation = field("the model's reply", lambda: first_generation(response), None)
        message = generation.message if isinstance(generation, ChatGeneration) else None
        text = field("the reply's text", lambda: _reply_text(generation), "")
        requested: list[ToolCall] = field(
            "the requested tool calls", lambda: requested_calls(message), []
        )
        attributes: dict[str, Any] = field("the token usage", lambda: _usage(message, response), {})
        blocks: list[dict[str, Any]] = field("the content blocks", lambda: _blocks(message), [])
        reasoning = field("the reasoning", lambda: _reasoning(blocks), None)
        if reasoning:
            attributes[REASONING] = reasoning
        served: list[ToolCall] = field(
            "the provider's tool calls", lambda: _provider_calls(blocks), []
        )
        unreadable: list[ToolCall] = field(
            "the unreadable tool calls",
            # JSON cut short or malformed: an agent whose model asked for nothing else ends
            # with an empty answer
            lambda: [unreadable_call(c) for c in getattr(message, "invalid_tool_calls", ())],
            [],
        )
        # the call ran the provider's tools, and no tool will run the unreadable ones: the
        # spans of both end inside it
        for index, (call, marks) in enumerate(
            [
                *((call, {PROVIDER_TOOL: True}) for call in served),
                *((call, {}) for call in unreadable),
            ]
        ):
            key = (e.run_id, "tool in the call", index)  # an unreadable call may have no id
            self.assembler.start_span(
                key,
                e.run_id,
                SpanKind.TOOL,
                call.name,
                start_time=e.at,
                attributes=marks,
                tool_call=call,
            )
            self.assembler.end_span(key, output=call.result, error=call.error, end_time=e.at)
        requested = served + requested + unreadable
        refused = (
            None if text or requested else field("the refusal", lambda: refusal(message), None)
        )
        if refused is not None:  # the reply is what the model said in its place
            attributes[REFUSAL] = text = refused
        finished = field("the finish reason", lambda: _finish_reason(message, generation), None)
        if finished:
            attributes[FINISH_REASONS] = [finished]
        first_token = self._streaming.pop(e.run_id, None)
        started = self.assembler.start_time_of(e.run_id)
        if first_token is not None and started is not None:  # streamed: how long to the first
            attributes["agenteval.time_to_first_token_ms"] = round(
                (first_token - started) * 1000, 3
            )
        self.assembler.end_span(
            e.run_id,
            output=text,
            end_time=e.at,
            attributes=attributes,
            requested_tool_calls=requested,
            thought=step_thought(reasoning, text) if requested else None,
        )

    def _tool_start(self, e: Event) -> None:
        serialized, input_str = e.args
        name = (serialized or {}).get("name") or e.kwargs.get("name") or "tool"
        if name == UNPARSED_REPLY:  # no tool call: the agent's reply did not parse
            self._unparsed.add(e.run_id)
            self._start(e, SpanKind.CHAIN, "unparsed reply", jsonable(input_str))
            return
        inputs = e.kwargs.get("inputs")
        arguments = jsonable(inputs if isinstance(inputs, dict) else self.arguments(input_str))
        call_id = e.kwargs.get("tool_call_id")
        decided = self._actions.get(e.parent_run_id) if e.parent_run_id is not None else None
        if call_id is None and decided:  # a classic AgentExecutor runs its agent's actions
            found = next((i for i, (tool, _) in enumerate(decided) if tool == name), None)
            if found is not None:
                call_id = decided.pop(found)[1]
        call = ToolCall(id=call_id, name=name, arguments=arguments)
        self._start(
            e,
            SpanKind.TOOL,
            name,
            arguments,
            tool_call=call,
        )

    def _tool_end(self, e: Event) -> None:
        output = e.args[0]
        if e.run_id in self._unparsed:  # what the model was told of its reply's format
            self._unparsed.discard(e.run_id)
            told = _text(output)
            self.assembler.end_span(e.run_id, output=told, error=told, end_time=e.at)
            return
        attributes: dict[str, Any] | None = None
        if type(output).__name__ == "Command":  # a LangGraph tool that updates the state
            span = self.assembler.span_of(e.run_id)
            call_id = span.tool_call.id if span is not None and span.tool_call else None
            command = output
            unread: tuple[Any, dict[str, Any]] = (command, {})
            output, attributes = self.assembler.field(
                "the command's tool message", lambda: _command_reply(command, call_id), unread
            )
        if isinstance(output, ToolMessage) and output.artifact is not None:
            # what the tool returned beside its text, in brief
            artifact = output.artifact
            summary = self.assembler.field("the tool's artifact", lambda: _summary(artifact), None)
            if summary:
                attributes = {**(attributes or {}), "agenteval.tool.artifact": summary}
        result, error = _message_returned(output)
        self.assembler.end_span(
            e.run_id, output=result, error=error, end_time=e.at, attributes=attributes
        )

    def _retriever_start(self, e: Event) -> None:
        serialized, query = e.args
        name = e.kwargs.get("name") or (serialized or {}).get("name") or "retriever"
        self._start(e, SpanKind.RETRIEVER, name, query)

    def _end_output(self, e: Event) -> None:
        output = e.args[0]
        replies = _tool_node_replies(output)
        if replies:
            self._record_unrun(e, replies)
        self._emulated.pop(e.run_id, None)
        self._requests.pop(e.run_id, None)
        self._actions.pop(e.run_id, None)
        self._task_steps.ended(e.run_id)
        answered = e.run_id in self._answers
        answer = self._answers.pop(e.run_id, None)
        span = self.assembler.span_of(e.run_id)
        inner = not self.assembler.is_root(e.run_id)
        if inner and span is not None:
            said = _limit_reached(span.name, output)
            root = self.assembler.root_key(e.run_id)
            if said is not None and root is not None:  # the run's end, if its answer stays
                self._limits_said[root] = said
        else:
            self._ended_at_limit(e.run_id, output)
        if answered:  # a classic AgentExecutor's: its agent's answer, not the executor's dict
            output = answer
        elif inner and span is not None and span.kind is SpanKind.AGENT:  # a sub-agent's answer
            output = answer_text(output, self._last_asked(e.run_id))
        elif inner:
            output = _state_summary(output)
        elif isinstance(output, dict) and output.get("__interrupt__"):
            self._interrupt(e.run_id, output["__interrupt__"])
            output = conversation_text(output, "ai")
        elif isinstance(output, dict) and output.get("structured_response") is not None:
            state = output
            self.assembler.field("the answer's schema", lambda: self._unlist_schema(e, state), None)
            output = output["structured_response"]  # create_agent(response_format=...)
        else:
            output = answer_text(output, self._last_asked(e.run_id))
        self.assembler.end_span(e.run_id, output=jsonable(output), end_time=e.at)

    def _last_asked(self, run_id: UUID) -> set[str]:
        """The ids of the calls the last own model call of ``run_id``'s trace asked for."""
        trace = self.assembler.trace_of(run_id)
        final = trace.final_model_call() if trace is not None else None
        return {call.id for call in final.requested_tool_calls if call.id} if final else set()

    def _unlist_schema(self, e: Event, state: dict[str, Any]) -> None:
        """``create_agent(response_format=ToolStrategy(...))`` offers the model its answer's
        schema as a tool, and the call that answered with it ran none: the schema is the
        answer's form, not one of the agent's tools."""
        trace = self.assembler.trace_of(e.run_id)
        messages = state.get("messages")
        answered = (
            next((m for m in reversed(messages) if getattr(m, "type", None) == "ai"), None)
            if isinstance(messages, list)
            else None
        )
        if trace is None or answered is None:
            return
        ran = {span.tool_call.name for span in trace.spans if span.tool_call is not None}
        schemas = {call["name"] for call in getattr(answered, "tool_calls", None) or ()} - ran
        trace.tools = [spec for spec in trace.tools if spec.name not in schemas]

    def _record_unrun(self, e: Event, replies: list[ToolMessage]) -> None:
        """The calls the node ``e`` answered without running their tools (no tool event
        said so) as tool spans, each with the arguments the agent asked for and what it was
        shown: a model's answer in the tool's place (LLMToolEmulator), a call of a tool the
        agent does not have, a call a middleware refused (in the tool node, or in its hook
        after the model, as ToolCallLimitMiddleware refuses calls over its limit)."""
        trace = self.assembler.trace_of(e.run_id)
        node = self.assembler.span_of(e.run_id)
        if trace is None or node is None:
            return
        # the usual reply answers a call that ran just now: its span is among the last, and
        # a long run's trace is searched no further
        unanswered = {message.tool_call_id for message in replies}
        for span in reversed(trace.spans):
            if span.tool_call is not None:
                unanswered.discard(span.tool_call.id)
                if not unanswered:
                    return
            if span is node:  # the node's own calls start after it
                break
        asked = {call.id: call for span in trace.spans for call in span.requested_tool_calls}
        ran = _ran_without_ids(trace.spans, node)
        emulated = e.run_id in self._emulated
        started = self._emulated.get(e.run_id) or node.start_time
        # a middleware's hook answering a call (ToolCallLimitMiddleware over its limit) is
        # no step of the agent, but the call it answered is the agent's: beside the hook
        parent = e.parent_run_id if node.attributes.get(INTERNAL_CALL) else e.run_id
        for message in replies:
            request = asked.get(message.tool_call_id)
            if request is None or message.tool_call_id not in unanswered:
                continue
            run = _run_for(request, ran)
            if run is not None:  # its tool ran, given the arguments alone: the call it ran
                run.id = request.id
                continue
            answer = _text(message.content)
            call = ToolCall(id=request.id, name=request.name, arguments=request.arguments)
            key = (e.run_id, request.id)
            self.assembler.start_span(
                key,
                parent,
                SpanKind.TOOL,
                request.name,
                input=request.arguments,
                start_time=started,
                attributes={TOOL_EMULATED if emulated else TOOL_NOT_RUN: True},
                tool_call=call,
            )
            error = answer if message.status == "error" else None
            self.assembler.end_span(key, output=answer, error=error, end_time=e.at)

    def _end_error(self, e: Event) -> None:
        self._emulated.pop(e.run_id, None)
        error = e.args[0]
        self._requests.pop(e.run_id, None)
        self._task_steps.ended(e.run_id, raised=True)
        self._actions.pop(e.run_id, None)
        self._answers.pop(e.run_id, None)
        self._unparsed.discard(e.run_id)
        self._limits_said.pop(e.run_id, None)
        flow = control_flow(error)
        if flow is None:
            ended = limit_or_timeout(type(error).__name__, str(error))
            if ended is not None:
                self.assembler.mark(e.run_id, ended, error_text(error))
            if self.assembler.is_root(e.run_id):
                self._unfinished_run(e.run_id)
            self.assembler.fail_span(e.run_id, error, end_time=e.at)
            return
        # an interrupt or a handoff passes through spans as an exception: control flow, not
        # a failure
        if flow == "interrupt":
            self._interrupt(e.run_id, error.args[0] if error.args else None)
        self.assembler.end_span(
            e.run_id,
            end_time=e.at,
            attributes={CONTROL_FLOW: flow, **_goto(error.args[0] if error.args else None)},
        )

    def _ended_at_limit(self, root: UUID, output: Any) -> None:
        """Mark a run ``limit`` when its last message is what ended it at a limit: a
        call-limit middleware's words (a sub-agent it ended leaves its parent to go on and
        answer), or ``create_react_agent``'s :data:`OUT_OF_STEPS`."""
        said, final = self._limits_said.pop(root, None), _last_ai_text(output)
        if final is not None and final == said:
            self.assembler.mark(root, RunStatus.LIMIT, said)
        elif final == OUT_OF_STEPS:
            reason = f"out of steps (recursion_limit): the agent answered {OUT_OF_STEPS!r}"
            self.assembler.mark(root, RunStatus.LIMIT, reason)

    def _interrupt(self, key: UUID, interrupts: Any) -> None:
        """The run ``key`` belongs to paused at ``interrupts`` (a node's: parallel tasks
        pause one by one, and the run waits at every one)."""
        interrupts = list(interrupts or [])
        asked = {
            str(i.id): jsonable(i.value) for i in interrupts if getattr(i, "id", None) is not None
        }
        kept = self._unfinished_run(key, asked=asked or None)
        waiting = kept.asked if kept is not None and kept.asked else asked
        values = waiting.values() if waiting else [getattr(i, "value", i) for i in interrupts]
        reason = "waiting for a human: " + "; ".join(sorted(str(v) for v in values))
        trace = self.assembler.trace_of(key)
        if trace is not None and trace.status is RunStatus.INTERRUPTED:
            trace.status_reason = reason  # another of the pause's interrupts
        else:
            self.assembler.mark(key, RunStatus.INTERRUPTED, reason)

    def _unfinished_run(
        self, key: UUID, *, asked: dict[str, Any] | None = None
    ) -> Unfinished | None:
        """Remember the run ``key`` belongs to as its thread's unfinished one (it paused at
        interrupts that ``asked`` what they did, or its root failed): a run that resumes it
        from the thread's checkpoint takes it up. Returns what is kept."""
        trace = self.assembler.trace_of(key)
        thread = trace.metadata.get("thread_id") if trace is not None else None
        if thread is None:
            return None
        return self.assembler.keep_unfinished(thread, key, asked=asked)

    def _agent_action(self, e: Event) -> None:
        action = e.args[0]
        self._actions.setdefault(e.run_id, []).append(
            (str(action.tool), getattr(action, "tool_call_id", None))
        )
        trace = self.assembler.trace_of(e.run_id)
        if trace is not None:
            trace.metadata.setdefault("agent_actions", []).append(
                {"tool": action.tool, "tool_input": jsonable(action.tool_input), "log": action.log}
            )

    def _agent_finish(self, e: Event) -> None:
        finish = e.args[0]
        answer = (
            finish.return_values.get("output") if isinstance(finish.return_values, dict) else None
        )
        if answer is not None:
            self._answers[e.run_id] = answer
        if not finish.log and isinstance(answer, str) and answer in CLASSIC_STOPS:
            self.assembler.mark(e.run_id, RunStatus.LIMIT, answer)
        trace = self.assembler.trace_of(e.run_id)
        if trace is not None:
            trace.metadata["agent_finish"] = {
                "output": jsonable(finish.return_values),
                "log": finish.log,
            }
