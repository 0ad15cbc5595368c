"""For adapter authors: what a framework adapter records with.

Users never need these; an adapter for a new framework does. The shape every adapter
follows (see ``docs/architecture.md``, "Writing an adapter"):

- On the agent's thread, each framework callback becomes one event, a ``NamedTuple`` whose
  first field is the translator method that handles it, put on the evaluator's
  :class:`Recorder` (``recorder.pump.put``: a lock-free queue put, nothing else; keep the
  pump and read its ``put`` at each call, since the pump renews it after ``fork()`` and at
  close).
- On the recorder's one thread the translator maps the event to spans with its
  :class:`TraceAssembler` (``recorder.assembler(framework)``): ``start_span``,
  ``end_span`` (``fail_span`` for a span that raised: its text is :func:`error_text`,
  and a run its caller stopped is ``cancelled``), ``annotate``, ``mark``; every optional
  field is read under :meth:`TraceAssembler.field`, so an odd field costs that field,
  never the span.
- A tool span carries its :class:`~agenteval_core.ToolCall`, the one record of the call; a
  call the model asked for whose arguments could not be read is :func:`unreadable_call`, a
  failed call in a tool span inside its model call.
- A run ended by an exception that says how (a framework's limit or timeout:
  :func:`limit_or_timeout`; a stop by its caller: :func:`stopped_by_caller`) is marked so,
  by the exception's class name and message, the same rule the span import follows.
- A run that pauses for a human (or fails) and is resumed later as a run of its own: the
  adapter keeps the paused run under what the resumed run will show
  (:meth:`TraceAssembler.keep_unfinished`: a LangGraph thread, the tool call a LlamaIndex
  run waits in) and takes it up there (:meth:`TraceAssembler.take_unfinished`: the paused
  trace's id and request); a request found only after a run's start (in the state it goes
  on from) is :meth:`TraceAssembler.request_found`.
- Span attributes use the OpenTelemetry GenAI names spelled once here (``OPERATION_NAME``,
  ``REQUEST_MODEL``, ``PROVIDER_NAME``, ``INPUT_TOKENS``, ``OUTPUT_TOKENS``,
  ``FINISH_REASONS``: a final reply cut at the token limit makes the run ``limit``; the agent's
  name is :data:`~agenteval_core.AGENT_NAME`). The model's reasoning, apart from its text,
  is :data:`~agenteval_core.REASONING`; a call that asked for tools has
  :func:`step_thought` as its ``thought``.
- To stop loops, the adapter asks :meth:`Recorder.check_tool_call` before a tool runs (on
  the agent's thread, finding the run with :class:`RunRoots`); the refusal comes back to
  the translator as an :class:`AlertEvent`, in order with the run's events. Tasks a run
  starts where the framework says no graph step (LangGraph's functional API) take one
  from :class:`TaskSteps`, on both sides.
- A framework that calls its handlers on a thread of its own, possibly after the run
  returned, gives the recorder its wait (:meth:`Recorder.drain_before_flush`), so every
  flush of the evaluator includes those events.
- A value sent where its length is limited (an OpenTelemetry exporter under the SDK's
  attribute value length limit) is cut so a reader can tell: text with :func:`cut_within`,
  JSON with :func:`fit_json` (its longest strings cut, so it stays JSON); each cut string
  ends in the marker of its original size, as the capture writer cuts.
"""

from .metrics._loops import TaskSteps
from .online._react import json_arguments, react_actions
from .online._recorder import (
    CANCELLED_BY_CALLER,
    CLASSIC_STOPS,
    UNPARSED_REPLY,
    UNSET,
    AlertEvent,
    EventPump,
    Recorder,
    RunRoots,
    TraceAssembler,
    Unfinished,
    error_text,
    limit_or_timeout,
    no_such_tool,
    step_thought,
    stopped_by_caller,
    unreadable_call,
)
from .schema._capture import FittedJson, fit_json
from .schema._trace import (
    FINISH_REASONS,
    HUMAN_ANSWERS,
    INPUT_TOKENS,
    MEDIA_BLOCK_TYPES,
    OPERATION_NAME,
    OUTPUT_TOKENS,
    PROVIDER_NAME,
    REQUEST_MODEL,
    RESUME,
    RESUME_QUESTIONS,
    RESUMES_TRACE_ID,
    LatestKept,
    media_kind,
    resume_questions,
)
from .schema._values import cut_within

__all__ = [
    "CANCELLED_BY_CALLER",
    "CLASSIC_STOPS",
    "FINISH_REASONS",
    "HUMAN_ANSWERS",
    "INPUT_TOKENS",
    "MEDIA_BLOCK_TYPES",
    "OPERATION_NAME",
    "OUTPUT_TOKENS",
    "PROVIDER_NAME",
    "REQUEST_MODEL",
    "RESUME",
    "RESUMES_TRACE_ID",
    "RESUME_QUESTIONS",
    "UNPARSED_REPLY",
    "UNSET",
    "AlertEvent",
    "EventPump",
    "FittedJson",
    "LatestKept",
    "Recorder",
    "RunRoots",
    "TaskSteps",
    "TraceAssembler",
    "Unfinished",
    "cut_within",
    "error_text",
    "fit_json",
    "json_arguments",
    "limit_or_timeout",
    "media_kind",
    "no_such_tool",
    "react_actions",
    "resume_questions",
    "step_thought",
    "stopped_by_caller",
    "unreadable_call",
]
