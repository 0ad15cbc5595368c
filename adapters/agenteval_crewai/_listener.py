"""The CrewAI event-bus listener: each handler puts the event on the pump and returns.

Handlers are async so CrewAI runs them in order on its event loop thread (its sync handlers
run on a thread pool, out of order). The loop guard is a before-tool-call hook, CrewAI's
supported way to refuse a tool call: handler exceptions are swallowed by the bus.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any

import crewai.events as crew_events
from crewai.events import BaseEventListener, crewai_event_bus, event_context
from crewai.events.types import flow_events
from crewai.hooks.llm_hooks import (
    LLMCallHookContext,
    register_before_llm_call_hook,
    unregister_before_llm_call_hook,
)
from crewai.hooks.tool_hooks import (
    ToolCallHookContext,
    register_after_tool_call_hook,
    register_before_tool_call_hook,
    unregister_after_tool_call_hook,
    unregister_before_tool_call_hook,
)

from agenteval_core import OnlineEvaluator, ToolCall, current_session, default_evaluator, plain

from ._translate import (
    EVENT_NAMES,
    REPEATED_USAGE,
    BusEvent,
    Translator,
    flow_state,
    tool_result,
)

__all__ = ["AgentEvalListener"]

logger = logging.getLogger("agenteval")

_KICKOFF_SCOPES = frozenset({"crew_kickoff_started", "lite_agent_execution_started"})


def kickoff_in_scope() -> str | None:
    """The start event id of the crew or agent kickoff the running code belongs to: the
    innermost kickoff on CrewAI's event scope stack (a context variable, so each thread
    and task has its own), or None when there is none or the stack cannot be read. A Crew
    or Agent keeps only its last kickoff's id (``_kickoff_event_id``), which a kickoff of
    the same object on another thread overwrites: one agent serving concurrent requests."""
    stack = getattr(event_context, "_event_id_stack", None)  # CrewAI has no public reader
    try:
        entries = stack.get() if stack is not None else ()
        return next((str(i) for i, kind in reversed(entries) if kind in _KICKOFF_SCOPES), None)
    except (TypeError, ValueError):  # a shape of another CrewAI version
        return None


_listening: weakref.WeakKeyDictionary[OnlineEvaluator, AgentEvalListener] = (
    weakref.WeakKeyDictionary()
)
"""The listener that records into each evaluator: one at a time."""


class AgentEvalListener(BaseEventListener):
    """Captures every crew kickoff as a trace and scores it in the background.

    Args:
        evaluator: where traces go; default: the process-wide evaluator.
        session_id: groups every kickoff into one session. Without it, each kickoff's session
            is its ``inputs["session_id"]`` (``crew.kickoff(inputs={"session_id": ...})``),
            else the crew's id. One listener serves the whole process: CrewAI delivers every
            crew's events to every listener, so a listener per session would duplicate
            traces.
        stop_on_loop: before a tool runs, ask the evaluator's loop guard (through a CrewAI
            before-tool-call hook); when the call closes a loop (the same tool with the
            same arguments ``OnlineEvaluator(loop_repeat_threshold=...)`` times in one
            kickoff, or a cycle) it is refused, and so is every later tool call of that
            kickoff: the agent receives CrewAI's "blocked by hook" answer instead of a
            result and has to finish without tools. The refusals and the alert are on the
            trace, whose status is ``stopped``. (CrewAI itself refuses an immediately
            repeated identical call, and fails the kickoff at the 5th.)
    """

    def __init__(
        self,
        evaluator: OnlineEvaluator | None = None,
        *,
        session_id: str | None = None,
        stop_on_loop: bool = False,
    ) -> None:
        self.evaluator = evaluator if evaluator is not None else default_evaluator()
        self.recorder = self.evaluator.recorder
        self.translator = Translator(
            self.recorder, session_id=session_id, watch_loops=not stop_on_loop
        )
        self._active = True
        self._guarded = stop_on_loop
        if stop_on_loop:
            register_before_tool_call_hook(self._before_tool_call)
            register_after_tool_call_hook(self._after_tool_call)
        # the tools an agent is offered: its own, and those a crew adds to a task (MCP
        # servers', delegation), which CrewAI's events do not list
        self._offering: weakref.WeakSet[Any] = weakref.WeakSet()
        register_before_llm_call_hook(self._before_llm_call)
        earlier = _listening.get(self.evaluator)
        if earlier is not None and earlier._active:
            # both would hear every event of every crew: each kickoff captured twice
            earlier.close()
            logger.warning(
                "agenteval: a second AgentEvalListener for the same evaluator replaces the "
                "first (CrewAI sends every event to every listener, so both would capture "
                "each kickoff); make one listener per process"
            )
        _listening[self.evaluator] = self
        # the bus runs our handlers on its own loop, after the kickoff may have returned:
        # every flush of the evaluator (evaluator.captured(), close) waits for it first
        self.recorder.drain_before_flush(crewai_event_bus.flush)
        super().__init__()

    def setup_listeners(self, crewai_event_bus: Any) -> None:
        # ``put`` is read from the pump at each event: the pump renews it after a fork and
        # at close
        pump, handle = self.recorder.pump, self.translator.handle

        async def record(source: Any, event: Any, *_: Any) -> None:
            # CrewAI runs this in a context copied from the code that emitted the event, so
            # the session of agenteval_core.session(...) is seen here, not on the recorder's
            if self._active:
                # a flow's state is read now: resume() goes on once the bus has run the
                # handlers of its next event, and changes it before the recorder reads this
                state = flow_state(source) if type(event).__name__ == "FlowStartedEvent" else None
                pump.put(
                    BusEvent(
                        handle,
                        event,
                        time.time(),
                        source,
                        current_session(),
                        kickoff_in_scope(),
                        state,
                    )
                )

        for name in EVENT_NAMES:  # a flow's pauses are not among crewai.events' names
            event_type = getattr(crew_events, name, None) or getattr(flow_events, name)
            crewai_event_bus.on(event_type)(record)

    def _before_tool_call(self, context: ToolCallHookContext) -> bool | None:
        try:
            # the kickoff's start event id, the crew's or (Agent.kickoff(), without a crew)
            # the agent's: the key of the trace's root span
            kicked_off = context.crew if context.crew is not None else context.agent
            run = kickoff_in_scope() or getattr(kicked_off, "_kickoff_event_id", None)
            if run is None:
                return None
            call = ToolCall(name=context.tool_name, arguments=dict(context.tool_input or {}))
            task = context.task
            task_id = str(task.id) if task is not None else None
            alert = self.recorder.check_tool_call(
                run,
                call,
                refuse=self.translator.refuser(run, task_id, call),
                # a task run beside the crew's others makes its calls in a lane of its own
                lane=task_id if getattr(task, "async_execution", False) else None,
                key=_run_of(context),
            )
        except Exception as exc:  # a bug of ours must never reach the crew
            self.recorder.guard_failed(exc)
            return None
        return False if alert is not None else None

    def _after_tool_call(self, context: ToolCallHookContext) -> str | None:
        """A call the guard let through ended: the guard reads what it gave the agent."""
        try:
            if str(context.raw_tool_result).strip() == REPEATED_USAGE:
                # CrewAI answered the call itself (the agent's last one again): no tool
                # ran, and what it said is no news of the world, so the result is not known
                self.recorder.tool_returned(_run_of(context))
                return None
            # what the tool returned, as the trace records it
            returned = tool_result(context.tool_result)
            self.recorder.tool_returned(_run_of(context), plain(returned))
        except Exception as exc:  # a bug of ours must never reach the crew
            self.recorder.guard_failed(exc)
        return None  # the result as it is

    def _before_llm_call(self, context: LLMCallHookContext) -> bool | None:
        try:
            executor = context.executor
            tools = getattr(executor, "original_tools", None) or getattr(executor, "tools", None)
            run = kickoff_in_scope()
            if self._active and tools and run is not None and executor not in self._offering:
                self._offering.add(executor)  # an executor's tools are fixed: once each
                # after the events on their way, so the run's root is open when it comes
                self.recorder.put_after_drains((self.translator.offered, run, list(tools)))
        except Exception as exc:  # a bug of ours must never reach the crew
            logger.debug("agenteval: reading the tools offered failed: %s", exc)
        return None

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until CrewAI has delivered its events and they are captured and scored (as
        ``evaluator.flush`` does while this listener records)."""
        return self.evaluator.flush(timeout)

    def close(self) -> None:
        """Stop recording (the bus keeps no way to remove one listener's handlers)."""
        self._active = False
        self.recorder.forget_drain(crewai_event_bus.flush)
        unregister_before_llm_call_hook(self._before_llm_call)
        if self._guarded:
            unregister_before_tool_call_hook(self._before_tool_call)
            unregister_after_tool_call_hook(self._after_tool_call)


def _run_of(context: ToolCallHookContext) -> int:
    """One tool run's key in the hooks before and after it: CrewAI gives both the same
    arguments dict (each hook a context of its own)."""
    return id(context.tool_input)
