"""Span and event handlers on LlamaIndex's instrumentation dispatcher.

The handlers only put a typed event on the event pump; ``_translate.py`` turns the events into
spans on the pump's thread. LlamaIndex swallows handler exceptions, so the loop guard stops
a looping run the workflow way: it cancels the run's workflow handler.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from contextlib import contextmanager
from typing import Any

from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.span import active_span_id
from llama_index.core.instrumentation.span.simple import SimpleSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from llama_index.core.workflow import Workflow

from agenteval_core import (
    LoopAlert,
    OnlineEvaluator,
    current_session,
    default_evaluator,
)
from agenteval_core.recording import RunRoots, error_text

from ._translate import (
    SESSION_TAG,
    Instrumented,
    SpanDropped,
    SpanExited,
    SpanStarted,
    Streaming,
    Translator,
    reply_text,
    requested_call,
    tool_returned,
)

__all__ = ["LlamaIndexInstrumentation", "instrument"]

logger = logging.getLogger("agenteval")
RUN_TAG = "llamaindex.run_id"
"""The tag LlamaIndex workflows put on the spans of a run (the handler's ``run_id``)."""


_END = object()
"""What a stream's next read gives past its end."""


@contextmanager
def _inside(span_id: str) -> Iterator[None]:
    """Run the code of the block inside LlamaIndex's span ``span_id``: the spans it starts
    are that span's children (a stream read after the span returned)."""
    entered = active_span_id.set(span_id)
    try:
        yield
    finally:
        active_span_id.reset(entered)


def _runs_an_agent(name: str, instance: Any) -> bool:
    """Whether a span is a workflow's run (an agent's, an AgentWorkflow's)."""
    return name.endswith(".run") and isinstance(instance, Workflow)


class _SpanHandler(BaseSpanHandler[SimpleSpan]):
    """Records span starts, exits and drops (LlamaIndex calls it inline, on the agent's
    thread); with the guard on, checks each tool call before it runs."""

    def __init__(self, instrumentation: LlamaIndexInstrumentation) -> None:
        super().__init__()
        # bound once: the hot path reads attributes and puts, nothing else (``put`` is read
        # from the pump at each call: the pump renews it after a fork and at close)
        self._pump = instrumentation.recorder.pump
        translator = instrumentation.translator
        self._on_start, self._on_exit = translator.on_start, translator.on_exit
        self._on_drop, self._on_streaming = translator.on_drop, translator.on_streaming
        self._guard = instrumentation if instrumentation.stop_on_loop else None

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
        if (session := current_session()) is not None:  # read here: the recorder cannot see it
            tags = {**(tags or {}), SESSION_TAG: session}
        self._pump.put(
            SpanStarted(
                self._on_start, id_, parent_span_id, instance, bound_args, tags, time.time()
            )
        )
        if self._guard is not None:
            self._guard.check(id_, parent_span_id, bound_args, tags, instance)
        return None

    def prepare_to_exit_span(
        self,
        id_: str,
        bound_args: Any,
        instance: Any | None = None,
        result: Any | None = None,
        **kwargs: Any,
    ) -> SimpleSpan | None:
        if isinstance(result, StreamingResponse | AsyncStreamingResponse):
            # a streamed answer (a query engine's, a synthesiser's): the span ends when the
            # caller has read the stream, which then runs the model inside it
            self._pump.put(Streaming(self._on_streaming, id_))
            if isinstance(result, AsyncStreamingResponse):
                result.response_gen = self._read_async(id_, result.response_gen)
            else:
                result.response_gen = self._read(id_, result.response_gen)
        else:
            self._pump.put(SpanExited(self._on_exit, id_, result, time.time()))
        if self._guard is not None:
            self._guard.runs.exit(id_)
            self._guard.returned(id_, result, None)
        return None

    def _read(self, span_id: str, stream: Iterator[Any]) -> Generator[Any, None, None]:
        """``stream`` as its caller reads it, each read inside span ``span_id`` (the spans it
        starts are the span's children). Never reads the stream itself."""
        text: list[str] = []
        try:
            while True:
                with _inside(span_id):
                    token = next(stream, _END)
                if token is _END:
                    break
                text.append(str(token))
                yield token
        except BaseException as error:
            self._stream_ended(span_id, text, error)
            raise
        self._stream_ended(span_id, text)

    async def _read_async(
        self, span_id: str, stream: AsyncIterator[Any]
    ) -> AsyncGenerator[Any, None]:
        """:meth:`_read` for a stream read asynchronously."""
        text: list[str] = []
        try:
            while True:
                with _inside(span_id):
                    token = await anext(stream, _END)
                if token is _END:
                    break
                text.append(str(token))
                yield token
        except BaseException as error:
            self._stream_ended(span_id, text, error)
            raise
        self._stream_ended(span_id, text)

    def _stream_ended(
        self, span_id: str, text: list[str], error: BaseException | None = None
    ) -> None:
        """The span that returned a stream ends: read to its end, or no longer read (the
        caller stopped: what it read is the answer), with the text read; or reading it
        failed, with the error."""
        if error is None or isinstance(error, GeneratorExit):
            self._pump.put(SpanExited(self._on_exit, span_id, "".join(text), time.time()))
        else:
            self._pump.put(SpanDropped(self._on_drop, span_id, error, time.time()))

    def prepare_to_drop_span(
        self,
        id_: str,
        bound_args: Any,
        instance: Any | None = None,
        err: BaseException | None = None,
        **kwargs: Any,
    ) -> SimpleSpan | None:
        self._pump.put(SpanDropped(self._on_drop, id_, err, time.time()))
        if self._guard is not None:
            self._guard.runs.exit(id_)
            self._guard.returned(id_, None, err)
        return None


class _EventHandler(BaseEventHandler):
    """Records instrumentation events (LLM chat start and end)."""

    pump: Any = None
    translate: Any = None

    @classmethod
    def class_name(cls) -> str:
        return "AgentEvalEventHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        try:
            said = reply_text(event)
        except Exception:  # an odd reply: read on the recorder's thread, under its guard
            said = None
        self.pump.put(Instrumented(self.translate, event, time.time(), said))


class LlamaIndexInstrumentation:
    """agenteval's handlers on LlamaIndex's root dispatcher.

    Args:
        evaluator: where traces go; default: the process-wide evaluator.
        session_id: groups runs into a session; otherwise a ``session_id`` tag set with
            ``instrument_tags({"session_id": ...})`` is used.
        stop_on_loop: before a tool runs, ask the evaluator's loop guard; when the call
            closes a loop (the same tool with the same arguments
            ``OnlineEvaluator(loop_repeat_threshold=...)`` times, or a cycle) the call is
            refused (the agent's ``call_tool`` step answers that the tool is not available,
            and the tool never runs) and the run's workflow is cancelled
            (``WorkflowHandler.cancel_run``) when it was handed to :meth:`guard`. Every
            later call of the run is refused too. The refusal and the alert are on the
            trace, whose status is ``stopped``. A run not handed to :meth:`guard` cannot be
            stopped (LlamaIndex swallows what a handler raises): its looping calls are
            refused, it goes on, its alert says ``stopped=False`` and its trace ends as the
            run does, with the refused calls on it; a warning says so once.
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
        self.stop_on_loop = stop_on_loop
        self.translator = Translator(
            self.recorder, session_id=session_id, watch_loops=not stop_on_loop
        )
        self.runs = RunRoots()
        self._span_handler = _SpanHandler(self)
        self._event_handler = _EventHandler()
        self._event_handler.pump = self.recorder.pump
        self._event_handler.translate = self.translator.on_event
        self._handlers: dict[str, tuple[Any, asyncio.AbstractEventLoop]] = {}
        self._watchers: set[asyncio.Future[None]] = set()
        self._said_unguarded = False
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
        self._handlers[run.run_id] = (run, asyncio.get_running_loop())
        watcher = asyncio.ensure_future(self._forget_when_done(run))
        self._watchers.add(watcher)  # held, so the task is not collected before it runs
        watcher.add_done_callback(self._watchers.discard)
        return run

    async def _forget_when_done(self, run: Any) -> None:
        try:
            await run
        except BaseException:  # the caller sees how the run ended; this only tidies up
            pass
        finally:
            self._handlers.pop(run.run_id, None)

    def check(
        self,
        span_id: str,
        parent_id: str | None,
        bound_args: Any,
        tags: dict[str, Any] | None,
        instance: Any = None,
    ) -> None:
        """On the agent's thread: ask the guard about a tool call before it runs."""
        try:
            name = span_id.rsplit("-", 5)[0]
            # a workflow agent's run inside the run (an agent a tool runs): its calls have
            # a lane of their own while another such agent runs beside it
            agent = parent_id is not None and _runs_an_agent(name, instance)
            root = self.runs.enter(span_id, parent_id, may_be_agent=agent)
            if agent:
                self.runs.agent_found(span_id)
            if isinstance(instance, BaseLLM):  # what the model asks for next is a call of its own
                self.recorder.guard.model_called(root)
                return
            arguments = bound_args.arguments if bound_args is not None else {}
            call = requested_call(name, arguments)
            if call is None:
                return
            run_id = (tags or {}).get(RUN_TAG)
            alert = self.recorder.check_tool_call(
                root,
                call,
                refuse=self.translator.refuser(span_id, call),
                stops=run_id in self._handlers,
                lane=self.runs.lane(span_id),
                key=span_id,
            )
            if alert is not None:
                self._refuse(arguments["ev"], alert, run_id)
        except Exception as exc:  # a bug of ours must never reach the agent
            self.recorder.guard_failed(exc)

    def returned(self, span_id: str, result: Any, err: BaseException | None) -> None:
        """On the agent's thread: a span ends (or is dropped, with ``err``); a ``call_tool``
        step's tells the guard what its call gave the model."""
        if span_id.rsplit("-", 5)[0].endswith("call_tool"):
            try:
                if err is not None:
                    self.recorder.tool_returned(span_id, error=error_text(err))
                else:
                    self.recorder.tool_returned(span_id, *tool_returned(result))
            except Exception as exc:  # a bug of ours must never reach the agent
                self.recorder.guard_failed(exc)

    def _refuse(self, request: Any, alert: LoopAlert, run_id: str | None) -> None:
        # LlamaIndex swallows handler exceptions, so the call is refused through the request
        # the agent's call_tool step is about to look up: no tool has this name, so the step
        # answers with an error and the tool never runs.
        request.tool_name = f"{request.tool_name} (refused by the agenteval loop guard)"
        target = self._handlers.pop(run_id or "", None)
        if target is not None:
            run, loop = target
            logger.info("agenteval cancels a looping LlamaIndex run: %s", alert.message)
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(run.cancel_run()))
        elif not alert.stopped and not self._said_unguarded:
            # the dispatcher swallows what a handler raises: without the run's handler the
            # guard can refuse calls but not end the run
            self._said_unguarded = True
            logger.warning(
                "agenteval: the loop guard refuses the looping calls of a LlamaIndex run but "
                "cannot stop it: hand the run to the instrumentation to stop it "
                "(handler = instrumentation.guard(agent.run(...)))"
            )

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
    (call ``uninstrument()`` on it to stop).

    Call it once per process: LlamaIndex's dispatcher is process-wide, so a second
    instrumentation would see every run too. Calling it again replaces the first (with a
    warning), so no run is ever recorded twice. For a session per run, tag the run:
    ``with instrument_tags({"session_id": "user-42"}): await agent.run(...)``.
    """
    global _installed
    if _installed is not None and _installed.installed:
        logger.warning(
            "agenteval: instrument() was called again; the new instrumentation replaces the "
            "first (give each run its session with instrument_tags({'session_id': ...}))"
        )
        _installed.uninstrument()
    _installed = LlamaIndexInstrumentation(
        evaluator, session_id=session_id, stop_on_loop=stop_on_loop
    ).instrument()
    return _installed


_installed: LlamaIndexInstrumentation | None = None
