"""The LangChain callback handlers: each hook puts one tuple on the event pump and returns.

Everything else — naming, message conversion, span building, scoring — happens on the
pump's thread (see ``_translate.py``) and the evaluator's loop, never on the agent's thread.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler

from agenteval_core import AgentEvalError
from agenteval_core._online import LiveLoopMonitor, LoopAlert, OnlineEvaluator, default_evaluator
from agenteval_core._recorder import EventPump, ToolStart
from agenteval_core._schema import ToolCall

from ._translate import Translator

__all__ = ["AgentEvalCallbackHandler", "AgentLoopError", "AsyncAgentEvalCallbackHandler"]

logger = logging.getLogger("agenteval")

HOOKS = (
    "on_chain_start",
    "on_chain_end",
    "on_chain_error",
    "on_chat_model_start",
    "on_llm_start",
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
    """Raised into the agent by the loop guard (``stop_on_loop=True``) to stop a looping run."""

    def __init__(self, alert: LoopAlert) -> None:
        self.alert = alert
        super().__init__(f"agenteval stopped the run: {alert.message}")


class _Recorder:
    """The state shared by the sync and async handlers: pump, translator, loop guard."""

    def __init__(
        self,
        evaluator: OnlineEvaluator | None,
        session_id: str | None,
        stop_on_loop: bool,
        loop_repeat_threshold: int,
    ) -> None:
        self.evaluator = evaluator if evaluator is not None else default_evaluator()
        self.translator = Translator(
            self.evaluator, session_id=session_id, watch_loops=not stop_on_loop
        )
        self.pump = EventPump(self.translator.handle, name="agenteval-langchain")
        self.evaluator.attach(self.pump)
        self.put = self.pump.put
        self.stop_on_loop = stop_on_loop
        # The guard must decide before the tool runs, so it watches tool starts here; it only
        # costs anything on tool events, and only when enabled.
        self.guard = (
            LiveLoopMonitor(repeat_threshold=loop_repeat_threshold) if stop_on_loop else None
        )
        self.roots: dict[UUID, UUID] = {}

    def guard_event(
        self,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        run_id: UUID,
        parent_run_id: UUID | None,
    ) -> None:
        """Track run roots and check tool starts for loops; raises only ``AgentLoopError``."""
        if parent_run_id is not None:
            self.roots[run_id] = self.roots.get(parent_run_id, parent_run_id)
        if name != "on_tool_start":
            return
        try:
            self.check_guard(args[0], kwargs.get("inputs") or args[1], run_id, parent_run_id)
        except AgentLoopError:
            raise
        except Exception as exc:  # a bug of ours must never reach the agent
            logger.debug("agenteval loop guard failed: %s", exc)

    def check_guard(
        self, serialized: Any, inputs: Any, run_id: UUID, parent_run_id: UUID | None
    ) -> None:
        assert self.guard is not None
        root = self.roots.get(parent_run_id, parent_run_id) if parent_run_id else run_id
        name = (serialized or {}).get("name") or "tool"
        arguments = inputs if isinstance(inputs, dict) else {"input": inputs}
        call = ToolCall(name=name, arguments=arguments)
        alert = self.guard.observe(ToolStart(root, str(root), None, run_id, call, time.time()))
        if alert is not None:
            self.evaluator.report_alert(alert)
            raise AgentLoopError(alert)


def _make_hook(name: str) -> Any:
    def hook(
        self: Any, *args: Any, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._put((name, run_id, parent_run_id, args, kwargs, _now()))
        if self._guarded:
            self._recorder.guard_event(name, args, kwargs, run_id, parent_run_id)

    hook.__name__ = name
    return hook


def _make_async_hook(name: str) -> Any:
    sync = _make_hook(name)

    async def hook(self: Any, *args: Any, **kwargs: Any) -> None:
        sync(self, *args, **kwargs)

    hook.__name__ = name
    return hook


class _HandlerSetup:
    """What the sync and async handlers share: the recorder and the two hot-path attributes."""

    run_inline = True  # the hot path is a thread-safe queue put; no need for an executor hop
    raise_error: bool

    def __init__(
        self,
        evaluator: OnlineEvaluator | None = None,
        *,
        session_id: str | None = None,
        stop_on_loop: bool = False,
        loop_repeat_threshold: int = 3,
    ) -> None:
        super().__init__()
        self._recorder = _Recorder(evaluator, session_id, stop_on_loop, loop_repeat_threshold)
        self._put = self._recorder.put  # the hot path reads these two attributes only
        self._guarded = stop_on_loop
        self.raise_error = stop_on_loop

    @property
    def evaluator(self) -> OnlineEvaluator:
        return self._recorder.evaluator

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until this handler's runs are captured and scored."""
        return self._recorder.evaluator.flush(timeout)


class AgentEvalCallbackHandler(_HandlerSetup, BaseCallbackHandler):
    """Captures every LangChain / LangGraph run as a trace and scores it in the background.

    Args:
        evaluator: where traces go; default: the process-wide :func:`default_evaluator`
            (capture to ``agenteval-capture.jsonl``).
        session_id: groups runs into a session; otherwise taken from run metadata
            (``session_id``) or LangGraph's ``thread_id``.
        stop_on_loop: raise :class:`AgentLoopError` into the run when it calls the same tool
            with the same arguments ``loop_repeat_threshold`` times (or cycles), which stops
            it the LangChain way (the handler sets ``raise_error``).
    """


class AsyncAgentEvalCallbackHandler(_HandlerSetup, AsyncCallbackHandler):
    """The same handler for async-only callback managers (same arguments)."""


for _name in HOOKS:
    setattr(AgentEvalCallbackHandler, _name, _make_hook(_name))
    setattr(AsyncAgentEvalCallbackHandler, _name, _make_async_hook(_name))
