"""CrewAI events → core spans. Runs on the event pump's thread, in emission order."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from crewai.utilities.i18n import I18N_DEFAULT
from crewai.utilities.string_utils import sanitize_tool_name

from agenteval_core import (
    AGENT_NAME,
    GRAPH_STEP,
    INTERNAL_CALL,
    TOOL_NOT_RUN,
    RunStatus,
    Span,
    SpanKind,
    ToolCall,
    ToolSpec,
    plain,
)
from agenteval_core.recording import (
    FINISH_REASONS,
    INPUT_TOKENS,
    OPERATION_NAME,
    OUTPUT_TOKENS,
    PROVIDER_NAME,
    REQUEST_MODEL,
    RESUMES_TRACE_ID,
    AlertEvent,
    Recorder,
    TaskSteps,
    error_text,
    json_arguments,
    react_actions,
)

__all__ = ["EVENT_NAMES", "BusEvent", "Translator"]

STARTS = {
    # a Flow's run: its methods, and the crews and models they call, are one run
    "FlowStartedEvent": SpanKind.AGENT,
    "MethodExecutionStartedEvent": SpanKind.CHAIN,
    "CrewKickoffStartedEvent": SpanKind.AGENT,
    "LiteAgentExecutionStartedEvent": SpanKind.AGENT,
    "TaskStartedEvent": SpanKind.TASK,
    "AgentExecutionStartedEvent": SpanKind.AGENT,
    "LLMCallStartedEvent": SpanKind.LLM,
    "ToolUsageStartedEvent": SpanKind.TOOL,
    "LLMGuardrailStartedEvent": SpanKind.CHAIN,
    # a ReAct call of a tool the agent does not have: it never runs (no tool event comes),
    # and the model is shown the error; a span that starts and fails at once
    "ToolSelectionErrorEvent": SpanKind.TOOL,
    # an agent's knowledge searched for its task, and inside it CrewAI asking the agent's
    # model to rewrite the task as a search query (no task named: a run of its own before)
    "KnowledgeRetrievalStartedEvent": SpanKind.RETRIEVER,
    "KnowledgeQueryStartedEvent": SpanKind.CHAIN,
}
ENDS = {
    "FlowFinishedEvent",
    "MethodExecutionFinishedEvent",
    "FlowPausedEvent",
    "MethodExecutionPausedEvent",
    "CrewKickoffCompletedEvent",
    "LiteAgentExecutionCompletedEvent",
    "TaskCompletedEvent",
    "AgentExecutionCompletedEvent",
    "LLMCallCompletedEvent",
    "ToolUsageFinishedEvent",
    "LLMGuardrailCompletedEvent",
    "KnowledgeRetrievalCompletedEvent",
    "KnowledgeQueryCompletedEvent",
}
FAILURES = {
    "FlowFailedEvent",
    "MethodExecutionFailedEvent",
    "CrewKickoffFailedEvent",
    "LiteAgentExecutionErrorEvent",
    "TaskFailedEvent",
    "AgentExecutionErrorEvent",
    "LLMCallFailedEvent",
    "ToolUsageErrorEvent",
    "KnowledgeSearchQueryFailedEvent",
    "KnowledgeQueryFailedEvent",
}
ANSWERS = {"FlowInputReceivedEvent"}  # a flow's ask(): the human's answer, within its run
EVENT_NAMES = sorted(set(STARTS) | ENDS | FAILURES | ANSWERS)
PAUSED_FLOW = "paused flow"
"""What a flow paused for a human is kept under, with its id, for the run that resumes it."""

FLOW_EVENTS = frozenset(
    name for name in EVENT_NAMES if name.startswith(("Flow", "MethodExecution"))
)
"""Events of a Flow's run. CrewAI runs each agent's steps in a Flow of its own as well (its
``AgentExecutor``), whose events are not the user's flow and are left out."""
FROM_CACHE = "agenteval.tool.from_cache"
ATTEMPT = "agenteval.tool.attempt"
"""Which run of one requested call a tool span is, when CrewAI retried a failed call."""
GUARDRAIL_ATTEMPT = "agenteval.guardrail.attempt"
"""Which check of a task's answer a guardrail span is (1, then 2 after a rejection, ...)."""

FORCED_FINAL_ANSWER = I18N_DEFAULT.errors("force_final_answer")
"""What CrewAI asks the model, without task or agent, when an agent reaches ``max_iter``."""

MEMORY_PROMPTS = frozenset(
    I18N_DEFAULT.memory(stage)
    for stage in ("query_system", "extract_memories_system", "save_system", "consolidation_system")
)
"""The system prompts of CrewAI's memory asking the model (to distill a recall's queries,
extract memories from a task's result, place and consolidate them): its calls name no task,
and the saves run on a background thread, outside the agent's scope."""

FEEDBACK_COLLAPSE = I18N_DEFAULT.slice("human_feedback_collapse").split("{feedback}")[0]
"""How CrewAI asks a model which of a ``@human_feedback(emit=...)`` method's outcomes a
human's feedback means: the flow's own routing, no step of its run."""

OBSERVATION = "Observation:"

REPEATED_USAGE = I18N_DEFAULT.errors("task_repeated_usage").strip()
"""What CrewAI answers a ReAct request the same as the agent's last tool run with (same tool,
same arguments): it runs no tool and emits no tool event."""


_TIMED_OUT = re.compile(r"execution timed out after .*max_execution_time")
"""The error CrewAI ends an agent's task with past its ``max_execution_time`` (a plain
``TimeoutError`` whose text is the only sign)."""


def _content(message: Any) -> str | None:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


def _forced_final_answer(messages: Any) -> bool:
    """Whether an LLM call is CrewAI's forced final answer after ``max_iter``."""
    return (
        isinstance(messages, list)
        and bool(messages)
        and (_content(messages[-1]) == FORCED_FINAL_ANSWER)
    )


def _memory_call(messages: Any) -> bool:
    """Whether an LLM call is CrewAI's memory at work (see :data:`MEMORY_PROMPTS`)."""
    return isinstance(messages, list) and bool(messages) and _content(messages[0]) in MEMORY_PROMPTS


def _feedback_history(flow: Any) -> list[Any]:
    """The human feedback a flow keeps (``HumanFeedbackResult`` each, oldest first)."""
    history = getattr(flow, "human_feedback_history", None)
    return history if isinstance(history, list) else []


class FlowState(NamedTuple):
    """What a flow held as its start event was heard. The recorder reads the event later,
    when ``resume()`` may have kept the human's answer and stopped the flow's pause."""

    resuming: bool
    """It was paused for a human and is resumed (``resume()``)."""
    answers: int
    """How many answers of a human it kept already (its earlier runs')."""


def flow_state(flow: Any) -> FlowState:
    """A flow's :class:`FlowState` now."""
    pending = getattr(flow, "_pending_feedback_context", None)
    return FlowState(pending is not None, len(_feedback_history(flow)))


def _feedback_collapse(messages: Any) -> bool:
    """Whether an LLM call is CrewAI routing a human's feedback (:data:`FEEDBACK_COLLAPSE`)."""
    first = _content(messages[0]) if isinstance(messages, list) and messages else None
    return isinstance(first, str) and first.startswith(FEEDBACK_COLLAPSE)


def _observations(messages: Any) -> list[tuple[str | None, str]]:
    """What the model was shown of the tool runs since its last turn: each tool message
    (native calling: its call id and content), or the ``Observation:`` CrewAI appends to a
    ReAct reply (no id: it answers that reply's one action)."""
    if not isinstance(messages, list):
        return []
    shown: list[tuple[str | None, str]] = []
    for message in reversed(messages):
        role = message.get("role") if isinstance(message, dict) else None
        content = _content(message)
        if role == "tool" and content is not None:
            shown.append((message.get("tool_call_id"), content))
        elif role == "assistant":
            if not shown and content is not None and OBSERVATION in content:
                shown.append((None, content.rsplit(OBSERVATION, 1)[1].strip()))
            break
    return shown


def _text(value: Any) -> str:
    if value is None:
        return ""
    raw = getattr(value, "raw", None)
    return raw if isinstance(raw, str) else str(value)


def _inputs(event: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A flow's or crew's kickoff inputs, and its request: the inputs but the session key."""
    inputs = event.inputs if isinstance(event.inputs, dict) else {}
    return inputs, {k: v for k, v in inputs.items() if k != "session_id"}


def _task_id(event: Any) -> str | None:
    """The task an event belongs to (CrewAI fills ``task_id`` on some events only)."""
    if event.task_id:
        return str(event.task_id)
    task = getattr(event, "task", None) or getattr(event, "from_task", None)
    task_id = getattr(task, "id", None)
    return str(task_id) if task_id is not None else None


def _claim(asked: list[ToolCall], name: str, arguments: dict[str, Any]) -> str | None:
    """The provider id of the requested call a tool run answers (the same tool and
    arguments, else the next of that tool), taken off the list so no id is given twice."""
    for matches in (
        lambda c: c.name == name and c.arguments == arguments,
        lambda c: c.name == name,
    ):
        for index, call in enumerate(asked):
            if matches(call):
                return asked.pop(index).id
    return None


def _native_tool_calls(response: Any) -> list[ToolCall] | None:
    """The calls of a function-calling reply (a list of OpenAI-style tool calls, as dicts or
    objects, with the provider's ids); ``None`` for any other reply."""
    if not isinstance(response, list) or not response:
        return None
    calls = []
    for item in response:
        function = (
            item.get("function") if isinstance(item, dict) else getattr(item, "function", None)
        )
        name = (
            function.get("name") if isinstance(function, dict) else getattr(function, "name", None)
        )
        if not isinstance(name, str):
            return None
        arguments = (
            function.get("arguments")
            if isinstance(function, dict)
            else getattr(function, "arguments", None)
        )
        call_id = item.get("id") if isinstance(item, dict) else getattr(item, "id", None)
        calls.append(
            ToolCall(
                id=str(call_id) if call_id else None,
                name=name,
                arguments=json_arguments(arguments)
                if not isinstance(arguments, dict)
                else arguments,
            )
        )
    return calls


def _tool_specs(tools: Any) -> list[ToolSpec]:
    specs = []
    for tool in tools or []:
        schema = getattr(tool, "args_schema", None)
        try:
            parameters = schema.model_json_schema() if schema is not None else None
        except Exception:
            parameters = None
        specs.append(
            ToolSpec(
                # the name the tool is called by (CrewAI lists "Delegate work to coworker"
                # but calls it delegate_work_to_coworker)
                name=sanitize_tool_name(str(getattr(tool, "name", "tool"))),
                description=getattr(tool, "description", ""),
                parameters=parameters,
            )
        )
    return specs


NOT_FOUND = "Tool not found"
"""What CrewAI answers a native call of a tool the agent does not have with (it runs no tool,
and reports the text as the call's output)."""

TOOLS_REMINDER = "\n\n" + I18N_DEFAULT.slice("tools").split("{tools}")[0]
"""What CrewAI adds to every few tool results of a ReAct agent: a reminder of its tools and
its format, the agent's prompt and not what the tool returned (it is left out of the
result; the model call that follows shows what the model was sent)."""


def tool_result(output: Any) -> Any:
    """A tool's result without CrewAI's :data:`TOOLS_REMINDER`."""
    if isinstance(output, str) and (at := output.find(TOOLS_REMINDER)) >= 0:
        return output[:at]
    return output


BLOCKED = "Tool execution blocked by hook"
"""How CrewAI answers a tool call a before-tool-call hook refused (with native tool calling
it runs this stand-in through its tool events)."""


def _agent_of(role: Any) -> dict[str, Any]:
    """``gen_ai.agent.name``: the agent a span ran for (its role), when CrewAI says."""
    return {AGENT_NAME: str(role)} if role else {}


def _usage(event: Any) -> dict[str, Any]:
    usage = event.usage or {}
    if not usage:
        return {}
    return {
        INPUT_TOKENS: usage.get("prompt_tokens", 0),
        OUTPUT_TOKENS: usage.get("completion_tokens", 0),
    }


class BusEvent(NamedTuple):
    """One event of CrewAI's bus, as the listener puts it on the pump."""

    handle: Callable[[BusEvent], None]
    event: Any
    at: float
    """When the listener heard it (the event's own timestamp is preferred)."""
    source: Any
    session: str | None
    """The session of ``agenteval_core.session(...)`` where the event was emitted."""
    kickoff: str | None = None
    """The start event id of the kickoff whose scope the event was emitted in."""
    flow: FlowState | None = None
    """The flow's state as its start event was heard (``FlowStartedEvent`` only)."""


class Translator:
    """Pairs CrewAI start and end events (``started_event_id``) into spans.

    Loops are watched on the tool calls the model asks for (CrewAI answers an immediately
    repeated identical call itself, without running the tool or emitting tool events).
    LLM and tool events name parents that CrewAI does not publish, so they attach to the
    open agent execution of their task. Tool events carry no call id: each is
    linked to the LLM call that asked for it by order, as ``<llm call id>#<n>``.
    """

    def __init__(self, recorder: Recorder, *, session_id: str | None, watch_loops: bool) -> None:
        self.session_id = session_id
        # CrewAI itself refuses an immediately repeated identical tool call without emitting
        # tool events, so loops are watched on the calls the model asks for, not on tool spans.
        self.assembler = recorder.assembler("crewai", watch_loops=False)
        self._watch_loops = watch_loops
        self._executions: dict[str | None, str] = {}  # task id → its agent execution's span
        self._async_tasks: set[str | None] = set()  # tasks run beside the crew's others
        self._method_steps = TaskSteps()  # a flow's methods as the steps of a graph
        self._tasks: dict[str | None, str] = {}  # task id → span key
        # execution key → (the last LLM call id, or its native calls' ids; tools run since)
        self._last_llm: dict[str, tuple[str | list[ToolCall], int]] = {}
        self._last_call: dict[str, str | None] = {}  # execution key → its last tool run's id
        # execution key → the tool and arguments of its last tool run, and the ReAct call its
        # model's last reply asked for: CrewAI answers a request the same as that run itself
        self._last_run: dict[str, tuple[str, dict[str, Any]]] = {}
        self._asked: dict[str, ToolCall] = {}
        # execution key → the calls its model asked for that the guard watches (copies: the
        # guard reads what each returned, filled in as its tool ends), by call id
        self._watched: dict[str, dict[str, ToolCall]] = {}
        # execution key → the model call whose request named a tool the agent does not have
        self._unknown: dict[str, str | list[ToolCall]] = {}
        # scope → execution: CrewAI runs an agent's steps in a flow whose events it does not
        # publish here; the LLM and tool events name that flow as their parent
        self._scopes: dict[str, str] = {}
        # agent id → its own open kickoffs (Agent.kickoff(), no crew or task), oldest first:
        # the flows their steps run in are bound to them (see _bind_kickoff)
        self._agent_kickoffs: dict[str, list[str]] = {}
        # crew kickoff → its tasks' ids in order, and the plan by task number that CrewAI's
        # planning (Crew(planning=True)) adds to each task's description
        self._crew_tasks: dict[str, tuple[list[str], dict[int, str]]] = {}
        self._methods: set[str] = set()  # the open spans of flows' methods
        self._resumed_flows: set[str] = set()  # open flows resumed after a pause for a human
        self._feedback_seen: dict[str, int] = {}  # each open flow's human answers recorded

    def refuser(
        self, root: str, task_id: str | None, call: ToolCall
    ) -> Callable[[AlertEvent], None]:
        """What the recorder calls, in order with the events, to record a refused call
        (CrewAI opens no tool span for it) under the agent execution of its task."""

        def refuse(event: AlertEvent) -> None:
            # an agent's own kickoff has no task: its root span is its execution
            execution = self._executions.get(task_id) if task_id is not None else root
            if execution is not None and call.id is None:  # the id of the request refused
                call.id = self._call_id(execution, call.name, call.arguments)
            self.assembler.refuse(execution or root, event.alert, call=call)

        return refuse

    def _call_id(
        self, execution: str, name: str, arguments: dict[str, Any], attempt: int = 1
    ) -> str | None:
        """The id of the request a tool run answers: a native call's own id (CrewAI may run
        one reply's calls in any order), else the ReAct reply's LLM call id and the run's
        place after it. A retry (``attempt`` > 1) answers the request its first run did."""
        if attempt > 1 and execution in self._last_call:
            return self._last_call[execution]
        self._last_call[execution] = call_id = self._new_call_id(execution, name, arguments)
        return call_id

    def _new_call_id(self, execution: str, name: str, arguments: dict[str, Any]) -> str | None:
        asked, used = self._last_llm.get(execution, ("", 0))
        self._last_llm[execution] = (asked, used + 1)
        if isinstance(asked, list):
            return _claim(asked, name, arguments)
        return f"{asked}#{used}" if asked else None

    def handle(self, event: BusEvent) -> None:
        """Called on the recorder's thread with each event the listener heard."""
        payload, at, source, session = event.event, event.at, event.source, event.session
        name = type(payload).__name__
        if name in FLOW_EVENTS and type(source).__module__.startswith("crewai."):
            return  # an agent's executor, a flow of CrewAI's own: its steps are recorded
        at = payload.timestamp.timestamp() if getattr(payload, "timestamp", None) else at
        if name == "ToolSelectionErrorEvent":
            self._unknown_tool(payload, at, event.kickoff)
        elif name in STARTS:
            self._start(name, payload, at, source, session, event.kickoff, event.flow)
        elif name in ENDS:
            tool = self._watched_tool(name, payload)
            self._end(name, payload, at, source)
            self._returned(self._execution_of(payload), tool)
        elif name in FAILURES:
            tool = self._watched_tool(name, payload)
            self._fail(name, payload, at)
            self._returned(self._execution_of(payload), tool)
        elif name in ANSWERS:
            parent = self._parent(payload)
            if parent is not None and payload.response is not None:  # None: no answer came
                asked = getattr(payload, "message", None)
                self.assembler.human_answered(
                    parent, payload.response, question=asked if isinstance(asked, str) else None
                )

    def offered(self, item: tuple[Any, str, list[Any]]) -> None:
        """The tools an agent executor of run ``key`` offers its model (what CrewAI's
        events leave out: a crew's MCP and delegation tools): listed in the trace."""
        _, key, tools = item
        self.assembler.annotate(key, tools=_tool_specs(tools))

    def _unknown_tool(self, event: Any, at: float, kickoff: str | None) -> None:
        """A ReAct call of a tool the agent does not have: no tool runs (no tool event
        comes), and the model is shown the error. CrewAI looks the name up several times
        while parsing the one request (an event each): the request is one failed call,
        with the arguments the model gave."""
        execution = self._execution_of(event) or self._scopes.get(str(event.parent_event_id))
        asked = self._last_llm.get(execution or "", ("", 0))[0]
        if execution is None or self._unknown.get(execution) == asked:
            return
        self._unknown[execution] = asked
        self._start("ToolSelectionErrorEvent", event, at, kickoff=kickoff)
        span = self.assembler.span_of(event.event_id)
        root = self.assembler.root_key(execution)
        if not self._watch_loops and span is not None and span.tool_call and root is not None:
            # under stop_on_loop the guard is asked as a tool starts, and none starts for
            # this call: asked here, an agent asking for it over and over is alerted and
            # stopped (each later tool call refused); CrewAI answers this one itself
            # the event names no task: the one whose agent execution this is
            task = next((t for t, e in self._executions.items() if e == execution), None)
            self.assembler.recorder.check_tool_call(
                root,
                span.tool_call.model_copy(),
                refuse=lambda refused: self.assembler.refuse(root, refused.alert),
                lane=task if task in self._async_tasks else None,  # as the hook's lanes
            )
        self.assembler.end_span(
            event.event_id, error=str(event.error), end_time=at, attributes={TOOL_NOT_RUN: True}
        )

    def _watched_tool(self, name: str, event: Any) -> Span | None:
        """The tool span a tool's end event ends, while the guard watches the calls the
        model asks for."""
        if not self._watch_loops or not name.startswith("ToolUsage"):
            return None
        return self.assembler.span_of(event.started_event_id)

    def _returned(self, execution: str | None, tool: Span | None) -> None:
        """Tell the guard what the call of the tool span ``tool`` (ended) returned, as the
        trace records it: a call made again that finds something else is no loop."""
        call = tool.tool_call if tool is not None else None
        if tool is None or call is None or call.id is None:
            return
        watched = self._watched.get(execution or "", {}).pop(call.id, None)
        if watched is not None and not tool.attributes.get(TOOL_NOT_RUN):
            # CrewAI's own answer (no tool ran) stays not known: it is no news of the world
            watched.result, watched.error = call.result, call.error

    def _answered_by_crewai(self, execution: str | None, at: float) -> None:
        """Record the call the agent's last ReAct reply asked for if CrewAI answered it
        itself: no tool ran for it, and it was the same as the agent's last tool run, which
        CrewAI does not run again (it answers :data:`REPEATED_USAGE`, and fails the task
        once the agent has asked five times). The agent asked for it, so the trace has it
        (and ``tool_call_loops`` counts it, as the live guard does), failed with what the
        model was told. Called as the agent's next step starts, or as its execution ends."""
        call = self._asked.pop(execution or "", None)
        if execution is None or call is None:
            return
        used = self._last_llm.get(execution, ("", 0))[1]
        if used or self._last_run.get(execution) != (call.name, call.arguments):
            return  # a tool ran for it (or the loop guard refused it, and recorded that)
        root = self.assembler.root_key(execution)
        if root is not None and self.assembler.recorder.guard.stopped_by(root) is not None:
            # the guard's hook refuses every call of a run it stopped, before CrewAI's own
            # check: the refusal is the record (it may reach the recorder after this step)
            return
        key = ("answered by crewai", call.id)
        self.assembler.start_span(
            key,
            execution,
            SpanKind.TOOL,
            call.name,
            input=call.arguments,
            start_time=at,
            tool_call=call.model_copy(),
        )
        span = self.assembler.span_of(key)
        self.assembler.end_span(
            key,
            output=REPEATED_USAGE,
            error=f"not run: the same call as the agent's last one, which CrewAI answers "
            f"itself: {REPEATED_USAGE}",
            end_time=at,
            attributes={TOOL_NOT_RUN: True},
        )
        self._returned(execution, span)

    def _requested_arguments(self, key: str | None, call_id: str | None) -> dict[str, Any]:
        """The arguments of the call ``call_id`` a model of ``key``'s trace asked for."""
        trace = self.assembler.trace_of(key) if key is not None else None
        for span in reversed(trace.spans if trace is not None else []):
            for call in span.requested_tool_calls:
                if call.id == call_id:
                    return dict(call.arguments)
        return {}

    def _offered(self, key: str, tool_name: str) -> bool:
        """Whether ``tool_name`` is one of the tools offered in ``key``'s trace."""
        trace = self.assembler.trace_of(key)
        name = sanitize_tool_name(tool_name)
        return trace is not None and any(spec.name == name for spec in trace.tools)

    def _fail(self, name: str, event: Any, at: float) -> None:
        """End the span a failure event closes. CrewAI names the wrong start event on some
        (a failed task names its agent execution, a failed kickoff its task: one level too
        deep), so task and kickoff failures end their own span, found by task and by trace;
        the spans still open under them end with the same error."""
        raised = getattr(event, "error", None)
        # a flow's failure is the exception that ended it (its type said, as every adapter
        # says a run's); a tool's keeps the text CrewAI shows the model
        if name in FLOW_EVENTS and isinstance(raised, BaseException):
            error = error_text(raised)
        else:
            error = str(raised or "failed")
        started = event.started_event_id
        keys: list[Any] = [started]
        if name == "TaskFailedEvent":
            task = _task_id(event)
            keys = [k for k in (self._executions.get(task), self._tasks.get(task)) if k] or keys
        elif name == "CrewKickoffFailedEvent":
            # the root of the span it names (the kickoff itself, or its task); its parent
            # only when that span is gone: the parent comes from CrewAI's scope stack, which
            # a run that failed earlier on this thread may have left holding its own events
            keys = [
                self._crew_of(started)
                or self.assembler.root_key(started)
                or event.parent_event_id
                or started
            ]
        self._forget(name, event, at)
        if _TIMED_OUT.search(error):
            self.assembler.mark(keys[0], RunStatus.TIMEOUT, error)
        for key in keys:
            self.assembler.end_span(key, error=error, end_time=at)

    def _forget(self, name: str, event: Any, at: float) -> None:
        """Drop the lookup entries of an agent execution, task or flow method that ended
        (at ``at``)."""
        if name.startswith("MethodExecution"):
            self._methods.discard(str(event.started_event_id))
            self._method_steps.ended(str(event.started_event_id))
        elif name.startswith("Flow"):
            self._method_steps.ended(str(event.started_event_id))
            self._resumed_flows.discard(str(event.started_event_id))
            self._feedback_seen.pop(str(event.started_event_id), None)
        elif name.startswith("AgentExecution"):
            self._forget_execution(self._executions.pop(_task_id(event), None), at)
        elif name.startswith("Task"):
            # a task that failed may close its agent's execution with no event of its own
            self._answered_by_crewai(self._executions.get(_task_id(event)), at)
            self._tasks.pop(_task_id(event), None)
            self._async_tasks.discard(_task_id(event))
        elif name.startswith("CrewKickoff"):
            crew = self._crew_of(event.started_event_id)
            self._crew_tasks.pop(crew, None)
            if crew and not self.assembler.is_root(crew):  # in a flow: the guard checked its
                self.assembler.recorder.guard.forget(crew)  # calls by the crew's kickoff
        elif name.startswith("LiteAgent"):
            execution = event.started_event_id
            if not self.assembler.is_root(execution):  # kicked off inside a run: the guard
                self.assembler.recorder.guard.forget(execution)  # checked its calls by it
            for kickoffs in self._agent_kickoffs.values():
                if execution in kickoffs:
                    kickoffs.remove(execution)
            self._agent_kickoffs = {k: v for k, v in self._agent_kickoffs.items() if v}
            self._forget_execution(execution, at)

    def _forget_execution(self, execution: str | None, at: float) -> None:
        """Drop what was kept about the steps of an agent execution that ended (at ``at``),
        once the call its last step asked for is recorded, if CrewAI answered it itself."""
        self._answered_by_crewai(execution, at)
        self._last_llm.pop(execution or "", None)
        self._last_call.pop(execution or "", None)
        self._last_run.pop(execution or "", None)
        self._asked.pop(execution or "", None)
        self._watched.pop(execution or "", None)
        self._unknown.pop(execution or "", None)
        self._scopes = {k: v for k, v in self._scopes.items() if v != execution}

    def _parent(self, event: Any, kickoff: str | None = None) -> str | None:
        parent = event.parent_event_id
        if parent is not None and self.assembler.trace_of(parent) is not None:
            return str(parent)
        task = _task_id(event)
        found = self._executions.get(task) or self._tasks.get(task)
        if parent is not None and found is not None:
            self._scopes.setdefault(str(parent), found)
        elif parent is not None:  # no task named (the forced final answer): by its scope
            found = self._scopes.get(str(parent))
            if found is None:  # the first step of an agent's own kickoff
                found = self._bind_kickoff(str(parent), getattr(event, "agent_id", None), kickoff)
        return found

    def _session(self, session: str | None, inputs: dict[str, Any], own: Any) -> str | None:
        """A run's session: that of ``agenteval_core.session(...)`` where it was kicked off,
        the listener's, the kickoff's ``inputs["session_id"]``, else ``own`` (the flow's,
        the crew's or the agent's id)."""
        return (
            session
            or self.session_id
            or inputs.get("session_id")
            or (str(own) if own is not None else None)
        )

    def _within(self, event: Any) -> str | None:
        """The open span of a run a kickoff was made in (a flow's method, a task's
        guardrail, a tool), if any: it is a step of that run, not a run of its own."""
        within = event.parent_event_id
        return str(within) if within and self.assembler.trace_of(str(within)) else None

    def _crew_of(self, key: str | None) -> str:
        """The crew kickoff span at or above the open span ``key`` (the run's root, or a
        crew a flow's method kicked off); "" when there is none."""
        for _ in range(64):  # a crew's spans lie a few levels below it
            if key is None:
                break
            if key in self._crew_tasks:
                return key
            parent = self.assembler.parent_key(key)
            key = str(parent) if parent is not None else None
        return ""

    def _request(self, key: str, task_id: str | None, description: Any) -> Any:
        """What a crew kicked off without inputs was asked: its first task's description,
        without the plan CrewAI's planning added to it; None for a task that is not one of
        the crew's (the planner's own, which runs first)."""
        tasks, plans = self._crew_tasks.get(self._crew_of(key), ([], {}))
        if not tasks:
            return description
        if task_id not in tasks:
            return None
        plan = plans.get(tasks.index(task_id) + 1)
        if plan and isinstance(description, str) and description.endswith(plan):
            return description[: -len(plan)]
        return description

    def _bind_kickoff(self, scope: str, agent_id: Any, kickoff: str | None) -> str | None:
        """The agent's own kickoff (without a task) that a step of scope ``scope`` (a flow
        of the agent's executor) belongs to: ``kickoff``, the one the step was emitted in,
        when it is one of that agent's open kickoffs (a kickoff's first flow, and the next
        after its guardrail rejected an answer); else (CrewAI's scope stack unread) the
        oldest of them that no flow is bound to yet."""
        kickoffs = self._agent_kickoffs.get(str(agent_id)) if agent_id else None
        if not kickoffs:
            return None
        if kickoff not in kickoffs:
            bound = set(self._scopes.values())
            kickoff = next((k for k in kickoffs if k not in bound), None)
            if kickoff is None:
                return None
        self._scopes[scope] = kickoff
        return kickoff

    def _execution_of(self, event: Any) -> str | None:
        """The agent execution an LLM or tool event is a step of: its task's, else (the
        forced final answer; an agent's own kickoff, which has no task) its scope's."""
        task = _task_id(event)
        if task is not None:
            return self._executions.get(task)
        scope = event.parent_event_id
        return self._scopes.get(str(scope)) if scope is not None else None

    def _start(
        self,
        name: str,
        event: Any,
        at: float,
        source: Any = None,
        session: str | None = None,
        kickoff: str | None = None,
        flow: FlowState | None = None,
    ) -> None:
        key = event.event_id
        kind = STARTS[name]
        roots = ("FlowStartedEvent", "CrewKickoffStartedEvent", "LiteAgentExecutionStartedEvent")
        parent = None if name in roots else self._parent(event, kickoff)
        if name == "FlowStartedEvent":
            # the flow is the event's source; its id names the run's session, as CrewAI's
            # persistence (@persist) names a flow's state across kickoffs
            inputs, request = _inputs(event)
            flow_id = getattr(source, "flow_id", None)
            flow = flow or flow_state(source)
            resumed = None
            if flow.resuming and flow_id:
                # resume() after a pause for a human: the paused run's request, and its trace
                resumed = self.assembler.take_unfinished((PAUSED_FLOW, str(flow_id)))
                if resumed is not None:
                    request = resumed.request
            self.assembler.start_span(
                key,
                None,
                kind,
                event.flow_name or "flow",
                input=plain(request) or None,
                start_time=at,
                session_id=self._session(session, inputs, flow_id),
            )
            if resumed is not None:
                self.assembler.annotate(key, metadata={RESUMES_TRACE_ID: resumed.trace_id})
            if flow.resuming:
                self._resumed_flows.add(key)
            # the human's answers this run gets are those the flow keeps from its start on
            self._feedback_seen[key] = flow.answers
        elif name == "MethodExecutionStartedEvent":
            if parent is not None:  # a method of a flow whose start was seen
                self._methods.add(key)
                params = plain(event.params) or None
                self.assembler.start_span(
                    key,
                    parent,
                    kind,
                    event.method_name,
                    input=params,
                    start_time=at,
                    # listeners of one method run at once, and methods one after another
                    # are each other's work: the same method on the same input is a step on
                    attributes={
                        GRAPH_STEP: self._method_steps.step(parent, event.method_name, params, key)
                    },
                )
        elif name == "CrewKickoffStartedEvent":
            # the crew is the event's source (CrewAI leaves event.crew unset)
            # the request is what the crew was asked, not the session key beside it (with
            # nothing else given, the first task's description is the request)
            inputs, request = _inputs(event)
            within = self._within(event)  # kicked off in a flow's method: a step of its run
            self.assembler.start_span(
                key,
                within,
                kind,
                event.crew_name or "crew",
                input=plain(request) or None,
                start_time=at,
                session_id=None
                if within
                else self._session(session, inputs, getattr(source, "id", None)),
            )
            if within and request:  # a flow kicked off without inputs: what its crew was asked
                self.assembler.request_found(key, lambda: plain(request))
            tasks = getattr(source, "tasks", None)
            if isinstance(tasks, list):
                self._crew_tasks[key] = ([str(getattr(t, "id", "")) for t in tasks], {})
        elif name == "LiteAgentExecutionStartedEvent":
            # Agent.kickoff(): one agent, no crew or task; the agent is the event's source.
            # Kicked off inside a run (a task's LLM guardrail asks an agent; a tool kicks
            # one off), it is a step of that run, not a run of its own
            info = event.agent_info if isinstance(event.agent_info, dict) else {}
            role, agent_id = info.get("role"), info.get("id") or getattr(source, "id", None)
            within = self._within(event)
            self.assembler.start_span(
                key,
                within,
                kind,
                str(role or "agent"),
                input=plain(event.messages),
                start_time=at,
                session_id=None if within else self._session(session, {}, agent_id),
                tools=_tool_specs(event.tools),
                attributes=_agent_of(role),
            )
            if agent_id is not None:
                self._agent_kickoffs.setdefault(str(agent_id), []).append(key)
        elif name == "TaskStartedEvent":
            task = getattr(event, "task", None)
            description = getattr(task, "description", None) or event.task_name
            self.assembler.start_span(
                key, parent, kind, event.task_name or "task", input=description, start_time=at
            )
            trace = self.assembler.trace_of(key)
            if trace is not None and trace.input is None:  # a kickoff without inputs
                trace.input = self._request(key, _task_id(event), description)
            self._tasks[_task_id(event)] = key
            if getattr(task, "async_execution", False):  # its calls in a lane of its own
                self._async_tasks.add(_task_id(event))
        elif name == "AgentExecutionStartedEvent":
            role = event.agent_role or getattr(getattr(event, "agent", None), "role", None)
            self.assembler.start_span(
                key,
                parent,
                kind,
                role or "agent",
                input=getattr(event, "task_prompt", None),
                start_time=at,
                tools=_tool_specs(getattr(event, "tools", None)),
                attributes=_agent_of(role),
            )
            self._executions[_task_id(event)] = key
        elif name == "LLMCallStartedEvent":
            self._answered_by_crewai(self._execution_of(event), at)
            attributes = {
                OPERATION_NAME: "chat",
                REQUEST_MODEL: event.model,
                **_agent_of(
                    getattr(event, "agent_role", None) or self.assembler.agent_name_of(parent)
                ),
            }
            provider = getattr(source, "provider", None)  # the LLM emits its own events
            if isinstance(provider, str) and provider:
                attributes[PROVIDER_NAME] = provider
            if _memory_call(event.messages):
                # CrewAI's memory, not the agent: on its background thread, in the kickoff
                attributes[INTERNAL_CALL] = True
                if parent is None and kickoff is not None and self.assembler.trace_of(kickoff):
                    parent = kickoff
            owner = self.assembler.span_of(parent) if parent is not None else None
            if (owner is not None and owner.kind is SpanKind.TASK) or _feedback_collapse(
                event.messages
            ):
                # a task's own call after its agent answered (CrewAI converting the answer
                # into the task's output_pydantic / output_json), or a flow's routing of a
                # human's feedback: no step of the run
                attributes[INTERNAL_CALL] = True
            self.assembler.start_span(
                key,
                parent,
                kind,
                str(event.model or "llm"),
                input=plain(event.messages),
                start_time=at,
                attributes=attributes,
                # a model called outside any agent and any flow seen is a run of its own
                session_id=(session or self.session_id) if parent is None else None,
            )
            if parent in self._methods and not attributes.get(INTERNAL_CALL):
                # in a flow's step: the request of a flow without inputs
                self.assembler.request_found(key, lambda: plain(event.messages))
            shown: list[tuple[str | None, str]] = self.assembler.field(
                "the tool results", lambda: _observations(event.messages), []
            )
            for call_id, text in shown:
                self._shown_to_model(key, parent, call_id, text)
            if _forced_final_answer(event.messages):
                agent = self.assembler.agent_name_of(parent) or "an agent"
                self.assembler.mark(
                    key, RunStatus.LIMIT, f"{agent} reached max_iter: CrewAI forced a final answer"
                )
        elif name == "LLMGuardrailStartedEvent":
            # a task's guardrail checking the agent's answer; a rejection sends the task
            # back to the agent (a new execution under the task). The agent an LLMGuardrail
            # asks is CrewAI's, not the crew's: its calls are no steps of the run
            label = event.guardrail_name or event.guardrail_type or "guardrail"
            self.assembler.start_span(
                key,
                parent,
                kind,
                f"guardrail: {label}",
                start_time=at,
                attributes={
                    GUARDRAIL_ATTEMPT: int(event.retry_count or 0) + 1,
                    INTERNAL_CALL: True,
                },
            )
        elif name == "KnowledgeRetrievalStartedEvent":  # its query comes with its end
            role = getattr(event, "agent_role", None)
            self.assembler.start_span(
                key, parent, kind, "knowledge", start_time=at, attributes=_agent_of(role)
            )
        elif name == "KnowledgeQueryStartedEvent":
            # the framework's own model call, the task rewritten as a search query: no step
            self.assembler.start_span(
                key,
                parent,
                kind,
                "knowledge search query",
                input=getattr(event, "task_prompt", None),
                start_time=at,
                attributes={INTERNAL_CALL: True},
            )
        else:  # ToolUsageStartedEvent
            execution = self._execution_of(event) or ""
            arguments = json_arguments(event.tool_args)
            # a ReAct model may call "Delegate work to coworker"; CrewAI runs it as (and the
            # tool list says) delegate_work_to_coworker: one name for one tool
            tool_name = sanitize_tool_name(str(event.tool_name))
            attempt = getattr(event, "run_attempts", 1) or 1
            call_id = self._call_id(execution, tool_name, arguments, attempt)
            if name == "ToolSelectionErrorEvent":  # the event has none: the model's request's
                arguments = self._requested_arguments(parent, call_id)
            call = ToolCall(id=call_id, name=tool_name, arguments=arguments)
            if name != "ToolSelectionErrorEvent":
                self._last_run[execution] = (tool_name, arguments)
            attributes = _agent_of(getattr(event, "agent_role", None))
            if attempt > 1:
                attributes[ATTEMPT] = attempt
            self.assembler.start_span(
                key,
                parent,
                kind,
                tool_name,
                input=call.arguments,
                start_time=at,
                tool_call=call,
                attributes=attributes,
            )

    def _shown_to_model(
        self, key: str, execution: str | None, call_id: str | None, text: str
    ) -> None:
        """A failed tool run's result is the text CrewAI showed the model in its place
        (``Error executing tool: ...``, or a ReAct observation naming the error)."""
        if call_id is None and execution is not None:
            call_id = self._last_call.get(execution)
        if call_id is not None:
            self.assembler.shown_to_model(key, call_id, text)

    def _human_answers(self, key: str, flow: Any) -> None:
        """The answers a human gave the flow's ``@human_feedback`` methods since the last
        event of its run (a provider's or the console's, routed by ``emit`` or not): in the
        order given, the first of a resumed run the one it resumed with."""
        root = str(self.assembler.root_key(key))
        seen = self._feedback_seen.get(root)
        if seen is None:  # no flow of this run, or its start was not seen
            return
        given = _feedback_history(flow)[seen:]
        self._feedback_seen[root] = seen + len(given)
        for feedback in given:
            self.assembler.human_answered(
                root, getattr(feedback, "feedback", None), resumed=root in self._resumed_flows
            )

    def _end(self, name: str, event: Any, at: float, source: Any = None) -> None:
        key = event.started_event_id
        if name == "LLMCallCompletedEvent":
            native = _native_tool_calls(event.response)
            if native is not None:  # a function-calling model: calls, not text
                text, thought, requested = None, None, native
            else:
                text = _text(event.response)
                thought, requested = react_actions(text, call_ids=event.call_id)
                for call in requested:
                    call.name = sanitize_tool_name(call.name)
            attributes: dict[str, Any] = self.assembler.field(
                "the token usage", lambda: _usage(event), {}
            )
            finished = getattr(event, "finish_reason", None)  # as the provider said it
            if finished:  # a reply cut at the token limit makes the run a limit
                attributes[FINISH_REASONS] = [finished]
            execution = self._execution_of(event)
            if execution is not None:  # the tool runs that follow take these calls' ids
                asked = list(requested) if native else event.call_id
                self._last_llm[execution] = (asked, 0)
                if not native and requested:
                    self._asked[execution] = requested[0]
            root = self.assembler.root_key(key)
            if self._watch_loops and root is not None:
                # calls of their own, even under ids an earlier call had (a reused id)
                self.assembler.recorder.guard.model_called(root)
                watched = self._watched.setdefault(execution or "", {})
                for call in requested:
                    copy = watched[call.id or ""] = call.model_copy()
                    self.assembler.watch(key, copy, started=at)
            self.assembler.end_span(
                key,
                output=text,
                end_time=at,
                attributes=attributes,
                requested_tool_calls=requested,
                thought=thought,
            )
            return
        if name == "LLMGuardrailCompletedEvent":
            # a rejection is the guardrail's verdict on the answer, kept as the span's error
            passed = bool(event.success)
            self.assembler.end_span(
                key,
                output=plain(event.result) if passed else None,
                error=None if passed else str(event.error or "the guardrail rejected the answer"),
                end_time=at,
            )
            return
        if name in FLOW_EVENTS:  # a flow's or a method's result; a pause for a human
            self._forget(name, event, at)
            if name == "FlowPausedEvent":
                self.assembler.mark(
                    key, RunStatus.INTERRUPTED, f"the flow waits for a human: {event.message}"
                )
                self.assembler.keep_unfinished((PAUSED_FLOW, str(event.flow_id)), key)
            self._human_answers(key, source)
            result = getattr(event, "result", None)
            self.assembler.end_span(
                key, output=_text(result) if hasattr(result, "raw") else plain(result), end_time=at
            )
            return
        output = getattr(event, "output", None)
        if name == "TaskCompletedEvent":  # the planner's plans, before the tasks they extend
            planned = getattr(getattr(output, "pydantic", None), "list_of_plans_per_task", None)
            crew = self._crew_tasks.get(self._crew_of(key))
            if crew is not None and isinstance(planned, list):
                for step in planned:  # CrewAI uses a task's first plan
                    crew[1].setdefault(getattr(step, "task_number", 0), str(step.plan))
        self._forget(name, event, at)
        if name == "KnowledgeRetrievalCompletedEvent":  # the query, what it found
            span = self.assembler.span_of(key)
            if span is not None:
                span.input = event.query
            self.assembler.end_span(key, output=event.retrieved_knowledge, end_time=at)
            return
        if name != "ToolUsageFinishedEvent":
            self.assembler.end_span(key, output=_text(output), end_time=at)
            return
        if (
            isinstance(output, str)
            and output.startswith(BLOCKED)
            and self.assembler.fold_into_refusal(key)
        ):
            return  # CrewAI's stand-in for a call the guard refused: recorded once, refused
        if output == NOT_FOUND and not self._offered(key, str(event.tool_name)):
            # a native call of a tool the agent does not have: it failed, as the model saw
            self.assembler.end_span(
                key, output=output, error=output, end_time=at, attributes={TOOL_NOT_RUN: True}
            )
            return
        # a result CrewAI's tool cache answered: the tool itself did not run
        cached = {FROM_CACHE: True} if getattr(event, "from_cache", False) else None
        result = tool_result(output)
        self.assembler.end_span(key, output=plain(result), end_time=at, attributes=cached)
