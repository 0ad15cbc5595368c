"""Span and event handlers on LlamaIndex's instrumentation dispatcher.

The handlers only put a tuple on the event pump; ``_translate.py`` turns the events into
spans on the pump's thread. LlamaIndex swallows handler exceptions, so the loop guard stops
a looping run the workflow way: it cancels the run's workflow handler.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.span.simple import SimpleSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler

from agenteval_core._online import LoopAlert, OnlineEvaluator, default_evaluator
from agenteval_core._recorder import EventPump

from ._translate import Translator

__all__ = ["LlamaIndexInstrumentation", "instrument"]

logger = logging.getLogger("agenteval")


class _SpanHandler(BaseSpanHandler[SimpleSpan]):
    """Records span starts, exits and drops (LlamaIndex calls it inline)."""

    def __init__(self, put: Any) -> None:
        super().__init__()
        self._put = put

    @classmethod
    def class_name(cls) -> str:
        return "AgentEvalSpanHandler"

    def new_span(
        self,
        id_: str,
        bound_args: Any,
        instance: Any | None = None,
        parent_span_id: str | None = None,
        tags: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> SimpleSpan | None:
        self._put(("start", id_, parent_span_id, instance, bound_args, tags, time.time()))
        return None

    def prepare_to_exit_span(
        self,
        id_: str,
        bound_args: Any,
        instance: Any | None = None,
        result: Any | None = None,
        **kwargs: Any,
    ) -> SimpleSpan | None:
        self._put(("exit", id_, result, time.time()))
        return None

    def prepare_to_drop_span(
        self,
        id_: str,
        bound_args: Any,
        instance: Any | None = None,
        err: BaseException | None = None,
        **kwargs: Any,
    ) -> SimpleSpan | None:
        self._put(("drop", id_, err, time.time()))
        return None


class _EventHandler(BaseEventHandler):
    """Records instrumentation events (LLM chat start and end)."""

    put: Any = None

    @classmethod
    def class_name(cls) -> str:
        return "AgentEvalEventHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.put(("event", event, time.time()))


class LlamaIndexInstrumentation:
    """agenteval's handlers on LlamaIndex's root dispatcher.

    Args:
        evaluator: where traces go; default: the process-wide evaluator.
        session_id: groups runs into a session; otherwise a ``session_id`` tag set with
            ``instrument_tags({"session_id": ...})`` is used.
        stop_on_loop: when the evaluator's live monitor alerts on a run (the same tool with
            the same arguments ``OnlineEvaluator(loop_repeat_threshold=...)`` times, or a
            cycle), cancel that run's workflow (``WorkflowHandler.cancel_run``); the awaiting
            caller sees the cancellation.
    """

    def __init__(
        self,
        evaluator: OnlineEvaluator | None = None,
        *,
        session_id: str | None = None,
        stop_on_loop: bool = False,
    ) -> None:
        self.evaluator = evaluator if evaluator is not None else default_evaluator()
        self.stop_on_loop = stop_on_loop
        self.translator = Translator(self.evaluator, session_id=session_id)
        self.pump = EventPump(self.translator.handle, name="agenteval-llamaindex")
        self.evaluator.attach(self.pump)
        self._span_handler = _SpanHandler(self.pump.put)
        self._event_handler = _EventHandler()
        self._event_handler.put = self.pump.put
        self._runs: dict[str, tuple[Any, asyncio.AbstractEventLoop]] = {}
        if stop_on_loop:
            self.evaluator.add_alert_callback(self._stop_run)
        self.installed = False

    def instrument(self) -> LlamaIndexInstrumentation:
        """Add the handlers to the root dispatcher (idempotent)."""
        if not self.installed:
            dispatcher = get_dispatcher()
            dispatcher.add_span_handler(self._span_handler)
            dispatcher.add_event_handler(self._event_handler)
            self.installed = True
        return self

    def uninstrument(self) -> None:
        """Remove the handlers from the root dispatcher."""
        if self.installed:
            dispatcher = get_dispatcher()
            dispatcher.span_handlers.remove(self._span_handler)
            dispatcher.event_handlers.remove(self._event_handler)
            self.installed = False

    def guard(self, run: Any) -> Any:
        """Let the loop guard cancel this run (the ``WorkflowHandler`` that ``agent.run``
        returns). Returns it, so ``handler = instrumentation.guard(agent.run(...))`` works."""
        self._runs[run.run_id] = (run, asyncio.get_running_loop())
        return run

    def _stop_run(self, alert: LoopAlert) -> None:
        target = self._runs.pop(self.translator.run_ids.get(alert.trace_id, ""), None)
        if target is None:
            return
        run, loop = target
        logger.info("agenteval cancels a looping LlamaIndex run: %s", alert.message)
        loop.call_soon_threadsafe(lambda: asyncio.ensure_future(run.cancel_run()))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the runs seen so far are captured and scored."""
        return self.evaluator.flush(timeout)


def instrument(
    evaluator: OnlineEvaluator | None = None,
    *,
    session_id: str | None = None,
    stop_on_loop: bool = False,
) -> LlamaIndexInstrumentation:
    """Capture and score every LlamaIndex agent run from now on; returns the instrumentation
    (call ``uninstrument()`` on it to stop)."""
    return LlamaIndexInstrumentation(
        evaluator, session_id=session_id, stop_on_loop=stop_on_loop
    ).instrument()
