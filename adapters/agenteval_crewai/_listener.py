"""The CrewAI event-bus listener: each handler puts the event on the pump and returns.

Handlers are async so CrewAI runs them in order on its event loop thread (its sync handlers
run on a thread pool, out of order). The loop guard is a before-tool-call hook, CrewAI's
supported way to refuse a tool call: handler exceptions are swallowed by the bus.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import crewai.events as crew_events
from crewai.events import BaseEventListener, crewai_event_bus
from crewai.hooks.tool_hooks import (
    ToolCallHookContext,
    register_before_tool_call_hook,
    unregister_before_tool_call_hook,
)

from agenteval_core._online import LiveLoopMonitor, OnlineEvaluator, default_evaluator
from agenteval_core._recorder import EventPump, ToolStart
from agenteval_core._schema import ToolCall

from ._translate import EVENT_NAMES, Translator

__all__ = ["AgentEvalListener"]

logger = logging.getLogger("agenteval")


class AgentEvalListener(BaseEventListener):
    """Captures every crew kickoff as a trace and scores it in the background.

    Args:
        evaluator: where traces go; default: the process-wide evaluator.
        session_id: groups kickoffs into a session; otherwise the crew's id is used.
        stop_on_loop: refuse a tool call that repeats the same tool with the same arguments
            ``loop_repeat_threshold`` times in a task (or continues a short cycle), through a
            CrewAI before-tool-call hook; the agent receives the refusal instead of a result.
            (CrewAI already refuses an immediately repeated identical call on its own.)
    """

    def __init__(
        self,
        evaluator: OnlineEvaluator | None = None,
        *,
        session_id: str | None = None,
        stop_on_loop: bool = False,
        loop_repeat_threshold: int = 3,
    ) -> None:
        self.evaluator = evaluator if evaluator is not None else default_evaluator()
        self.translator = Translator(
            self.evaluator, session_id=session_id, watch_loops=not stop_on_loop
        )
        self.pump = EventPump(self.translator.handle, name="agenteval-crewai")
        self.evaluator.attach(self.pump)
        self._active = True
        self._guard = (
            LiveLoopMonitor(repeat_threshold=loop_repeat_threshold) if stop_on_loop else None
        )
        if stop_on_loop:
            register_before_tool_call_hook(self._before_tool_call)
        super().__init__()

    def setup_listeners(self, crewai_event_bus: Any) -> None:
        put = self.pump.put

        async def record(source: Any, event: Any, *_: Any) -> None:
            if self._active:
                put((event, time.time()))

        for name in EVENT_NAMES:
            crewai_event_bus.on(getattr(crew_events, name))(record)

    def _before_tool_call(self, context: ToolCallHookContext) -> bool | None:
        try:
            assert self._guard is not None
            run = f"{getattr(context.crew, 'id', '')}:{getattr(context.agent, 'id', '')}:{getattr(context.task, 'id', '')}"
            call = ToolCall(name=context.tool_name, arguments=dict(context.tool_input or {}))
            alert = self._guard.observe(ToolStart(run, run, None, run, call, time.time()))
        except Exception as exc:  # a bug of ours must never reach the crew
            logger.debug("agenteval loop guard failed: %s", exc)
            return None
        if alert is None:
            return None
        self.evaluator.report_alert(alert)
        return False

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until CrewAI has delivered its events and they are captured and scored."""
        crewai_event_bus.flush()
        return self.evaluator.flush(timeout)

    def close(self) -> None:
        """Stop recording (the bus keeps no way to remove one listener's handlers)."""
        self._active = False
        if self._guard is not None:
            unregister_before_tool_call_hook(self._before_tool_call)
