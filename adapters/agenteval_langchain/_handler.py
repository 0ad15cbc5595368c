"""The LangChain callback handlers: each hook puts one tuple on the event pump and returns.

Everything else — naming, message conversion, span building, scoring — happens on the
pump's thread (see ``_translate.py``) and the evaluator's loop, never on the agent's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler

from agenteval_core import (
    AgentEvalError,
    LoopAlert,
    OnlineEvaluator,
    ToolCall,
    current_session,
    default_evaluator,
)
from agenteval_core.recording import RunRoots, TaskSteps, error_text

from ._translate import (
    SESSION_KWARG,
    Event,
    Translator,
    chain_name,
    first_generation,
    graph_is_agent,
    graph_step,
    names_offered,
    requested_calls,
    task_step,
    tool_returned,
)

__all__ = ["AgentEvalCallbackHandler", "AgentLoopError", "AsyncAgentEvalCallbackHandler"]


HOOKS = (
    "on_chain_start",
    "on_chain_end",
    "on_chain_error",
    "on_chat_model_start",
    "on_llm_start",
    "on_llm_new_token",
    "on_llm_end",
    "on_llm_error",
    "on_tool_start",
    "on_tool_end",
    "on_tool_error",
    "on_retriever_start",
    "on_retriever_end",
    "on_retriever_error",
    "on_agent_action",
    "on_agent_finish",
)
_now = time.time


class AgentLoopError(AgentEvalError):
    """Raised into the agent by the loop guard (``stop_on_loop=True``) to stop a looping run.

    The run's output says so in one line, the ``agenteval`` logger's loop alert ("...;
    stopped the run"); LangChain's own "Error in ... callback" line for it is left out.
    """

    def __init__(self, alert: LoopAlert) -> None:
        self.alert = alert
        super().__init__(f"agenteval stopped the run: {alert.message}")


class _GuardStopIsNoCrash(logging.Filter):
    """Leaves out LangChain's ``Error in <handler>.<event> callback: AgentLoopError(...)``.

    LangChain logs every exception a callback raises, even one it then raises into the run
    as asked (``raise_error``): for the guard's stop that line reads like a crash, and the
    alert it would repeat is already logged by agenteval, naming the loop."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (
            isinstance(args, tuple)
            and len(args) == 3
            and str(args[2]).startswith(f"{AgentLoopError.__name__}(")
        )


_CALLBACK_LOGGER = logging.getLogger("langchain_core.callbacks.manager")
_CALLBACK_LOGGER.addFilter(_GuardStopIsNoCrash())


_MODEL_STARTS = frozenset({"on_chat_model_start", "on_llm_start"})


class _Guard:
    """The agent-thread side of the loop guard: finds each tool call's run, asks the
    evaluator's guard before the tool runs, and raises ``AgentLoopError`` on a loop."""

    def __init__(self, evaluator: OnlineEvaluator, translator: Translator) -> None:
        self.recorder = evaluator.recorder
        self.translator = translator
        self.runs = RunRoots()
        self._task_steps = TaskSteps()
        self._asking: dict[UUID, _ModelCall] = {}

    def _may_be_agent(self, args: tuple[Any, ...], kwargs: dict[str, Any], parent: Any) -> bool:
        """Whether a chain is traced as an agent once it runs a graph's steps."""
        return graph_is_agent(chain_name(args, kwargs), self.runs.inside_tool(parent))

    def event(
        self,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        run_id: UUID,
        parent_run_id: UUID | None,
    ) -> None:
        if name.endswith(("_end", "_error")):
            self.runs.exit(run_id)
            self._task_steps.ended(run_id, raised=name.endswith("_error"))
            asking = self._asking.pop(run_id, None)
            alert = None
            try:
                if name == "on_tool_error":
                    self.recorder.tool_returned(run_id, error=error_text(args[0]))
                elif name == "on_tool_end":
                    call_id = kwargs.get("tool_call_id")
                    self.recorder.tool_returned(run_id, *tool_returned(args[0], call_id))
                elif name == "on_llm_end" and asking is not None:
                    alert = self._no_tool_runs_for(args[0], asking)
            except Exception as exc:  # a bug of ours must never reach the agent
                self.recorder.guard_failed(exc)
            if alert is not None:
                raise AgentLoopError(alert)
            return
        step = graph_step(kwargs.get("tags"))
        called = None
        if step is None and name == "on_chain_start":
            called = task_step(
                self._task_steps,
                run_id,
                parent_run_id,
                chain_name(args, kwargs),
                kwargs.get("metadata") or {},
                args[1],
            )
        root = self.runs.enter(
            run_id,
            parent_run_id,
            tool=name == "on_tool_start",
            may_be_agent=name == "on_chain_start"
            and self._may_be_agent(args, kwargs, parent_run_id),
            step=step if step is not None else called,
        )
        if step is not None:
            self.runs.agent_found(parent_run_id)  # a graph: an agent, if named (as traced)
        agent = (kwargs.get("metadata") or {}).get("lc_agent_name")
        if name in _MODEL_STARTS:
            # what the model asks for next is a call of its own; a model a tool calls (its
            # summariser, a sub-agent) asks for none of the run's calls
            if not self.runs.inside_tool(parent_run_id):
                self.runs.model_started(run_id)
                lane = self.runs.lane(run_id)
                self.recorder.guard.model_called(
                    root, agent, lane, self.runs.branches(run_id, asked=False)
                )
                offered = names_offered(kwargs.get("invocation_params"))
                if offered:
                    self._asking[run_id] = _ModelCall(
                        root,
                        agent,
                        lane,
                        self.runs.branches(run_id, asked=True),
                        offered,
                        parent_run_id,
                    )
            return
        if name != "on_tool_start":
            return
        try:
            serialized, input_str = args[0], args[1]
            inputs = kwargs.get("inputs")
            arguments = inputs if isinstance(inputs, dict) else self.translator.arguments(input_str)
            call = ToolCall(
                id=kwargs.get("tool_call_id"),  # a retry middleware runs a call again under it
                name=(serialized or {}).get("name") or "tool",
                arguments=arguments,
            )
            refuse = self.translator.refuser(run_id)
            alert = self.recorder.check_tool_call(
                root,
                call,
                refuse=refuse,
                agent=agent,
                lane=self.runs.lane(run_id),
                branches=self.runs.branches(run_id, asked=bool(call.id)),
                key=run_id,
            )
        except Exception as exc:  # a bug of ours must never reach the agent
            self.recorder.guard_failed(exc)
            return
        if alert is not None:
            raise AgentLoopError(alert)

    def _no_tool_runs_for(self, response: Any, asked: _ModelCall) -> LoopAlert | None:
        """Ask the guard about the calls a model's reply asks for of tools it was not offered
        (a tool the agent does not have): no tool runs for them, so no tool start comes to
        ask at, and LangChain answers each with an error. An agent asking for one over and
        over was never stopped (the alert without ``stop_on_loop`` saw it)."""
        for call in requested_calls(getattr(first_generation(response), "message", None)):
            if call.name in asked.offered:
                continue
            alert = self.recorder.check_tool_call(
                asked.root,
                call,
                refuse=self.translator.refuser(asked.parent, call),
                agent=asked.agent,
                lane=asked.lane,
                branches=asked.branches,
            )
            if alert is not None:
                return alert
        return None


class _ModelCall(NamedTuple):
    """A model call of a run the guard watches, as it started: where the calls it asks for
    are made, and the tools it was offered."""

    root: Hashable
    agent: str | None
    lane: Hashable | None
    branches: Sequence[tuple[Hashable, Hashable]]
    offered: set[str]
    parent: UUID | None


def _make_hook(name: str) -> Any:
    def hook(
        self: Any, *args: Any, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        if parent_run_id is None and (session := current_session()) is not None:
            kwargs[SESSION_KWARG] = session  # read here: the recorder's thread cannot see it
        self._pump.put(Event(self._handlers[name], run_id, parent_run_id, args, kwargs, _now()))
        if self._guard is not None:
            self._guard.event(name, args, kwargs, run_id, parent_run_id)

    hook.__name__ = name
    return hook


class _HandlerSetup:
    """What the sync and async handlers share: the evaluator's recorder, a translator, and
    the guard when ``stop_on_loop``."""

    run_inline = True  # the hot path is a thread-safe queue put; no need for an executor hop
    raise_error: bool

    def __init__(
        self,
        evaluator: OnlineEvaluator | None = None,
        *,
        session_id: str | None = None,
        stop_on_loop: bool = False,
    ) -> None:
        super().__init__()
        self.evaluator = evaluator if evaluator is not None else default_evaluator()
        recorder = self.evaluator.recorder
        # With the guard on, calls are checked on the agent's thread before they run;
        # otherwise the recorder's thread watches them as it records them.
        self._translator = Translator(recorder, session_id=session_id, watch_loops=not stop_on_loop)
        # the hot path reads these three attributes only; ``put`` is read from the pump at
        # each call, since the pump renews it after a fork and at close
        self._pump = recorder.pump
        self._handlers = self._translator.handlers
        self._guard = _Guard(self.evaluator, self._translator) if stop_on_loop else None
        self.raise_error = stop_on_loop

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until this handler's runs are captured and scored."""
        return self.evaluator.flush(timeout)


class AgentEvalCallbackHandler(_HandlerSetup, BaseCallbackHandler):
    """Captures every LangChain / LangGraph run as a trace and scores it in the background.

    Handlers are cheap: every handler of one evaluator shares its one recorder thread, so
    building one per ``invoke`` costs no thread.

    Args:
        evaluator: where traces go; default: the process-wide :func:`default_evaluator`
            (capture to ``agenteval-capture.jsonl``).
        session_id: groups runs into a session; otherwise taken from run metadata
            (``session_id``) or LangGraph's ``thread_id``.
        stop_on_loop: before a tool runs, ask the evaluator's loop guard; when the call
            closes a loop (the same tool with the same arguments
            ``OnlineEvaluator(loop_repeat_threshold=...)`` times, or a cycle), raise
            :class:`AgentLoopError` into the run, which stops it the LangChain way (the
            handler sets ``raise_error``). The refused call and the alert are on the trace,
            whose status is ``stopped``.
    """


class AsyncAgentEvalCallbackHandler(_HandlerSetup, AsyncCallbackHandler):
    """The same handler for async-only callback managers (same arguments)."""


for _name in HOOKS:
    # Plain functions on the async handler too: LangChain calls them inline on both of its
    # paths, so a refusal raises into the run; as coroutines, the sync path (a sync tool
    # under ainvoke) would run them later and swallow the guard's exception.
    setattr(AgentEvalCallbackHandler, _name, _make_hook(_name))
    setattr(AsyncAgentEvalCallbackHandler, _name, _make_hook(_name))
