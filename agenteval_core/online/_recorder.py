"""The live path every adapter shares: one event pump, trace assembly and the loop guard.

Adapters put one event per framework callback on the evaluator's :class:`Recorder` (a
lock-free queue put, nothing else) and return. An event is a ``NamedTuple`` whose first
field is the translator method that handles it (so mypy checks both the event's
construction and its handler); the recorder's one thread calls it with the event, and the
translator builds spans with a :class:`TraceAssembler`, taking each optional field under
its own guard (:meth:`TraceAssembler.field`). Finished traces go to the evaluator. Tool
calls are checked by the one :class:`~agenteval_core.LoopGuard` before they run.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from .._fork import renew_after_fork
from .._sync import time_left
from ..metrics._loops import Branches, Lanes, LoopGuard, agents_above, steps_above
from ..schema._conversation import messages_of, share_conversation
from ..schema._trace import (
    AGENT_NAME,
    GRAPH_STEP,
    GUARD_REFUSED,
    HUMAN_ANSWERS,
    HUMAN_QUESTIONS,
    RESUME,
    LatestKept,
    LoopAlert,
    RunStatus,
    Span,
    SpanKind,
    ToolCall,
    ToolSpec,
    Trace,
    new_id,
)

__all__ = [
    "CANCELLED_BY_CALLER",
    "UNSET",
    "AlertEvent",
    "EventPump",
    "Recorder",
    "RunRoots",
    "TraceAssembler",
    "error_text",
]

logger = logging.getLogger("agenteval")

_T = TypeVar("_T")

CALLER_STOPS = (asyncio.CancelledError, GeneratorExit, KeyboardInterrupt)
"""Exceptions by which a run's caller, not the run, ends it: a cancelled task (a timeout
around the run, a client that went away), a stream closed before its end, Ctrl-C."""

STALE_AFTER = 600.0
"""Seconds without an event after which an open run counts as one that will never end (a
framework that lost its end event), evicted once more than ``max_open_runs`` are open."""

UNFINISHED_KEPT = 10_000
"""Paused or failed runs an assembler remembers for a run that resumes one (the least
recently kept are forgotten: a service runs for weeks)."""

OPEN_AT_CLOSE = "still running when the evaluator closed: recorded as it stood"
"""The status reason of a run the evaluator's ``close`` found still running (``unfinished``),
and the error of its spans still open."""

CANCELLED_BY_CALLER = "cancelled by its caller"
"""The status reason of a ``cancelled`` run."""


def error_text(error: BaseException) -> str:
    """An exception as a trace records it: its type and message, or its type alone when it
    has no message (``CancelledError``, not ``CancelledError: ``)."""
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def unreadable_call(asked: Any) -> ToolCall:
    """A call the model asked for whose arguments could not be read (one of LangChain's
    ``invalid_tool_calls``: a dict with ``id``, ``name``, ``args`` as the model wrote them
    and the parser's ``error``), as a trace records it: no tool runs it, so it is a call
    that failed, with no arguments and an error that says what the model wrote (for the
    adapter and the span import alike)."""
    written = asked.get("args")
    return ToolCall(
        id=asked.get("id"),
        name=str(asked.get("name") or "unnamed tool"),
        error=f"the model's arguments could not be read ({asked.get('error') or 'no JSON'})"
        + (f": {written[:300]}" if isinstance(written, str) and written else ""),
    )


_LIMIT_ERRORS = frozenset(
    # LangGraph's recursion limit; what LangChain's call-limit middlewares raise at their
    # limit (exit_behavior="error")
    {"GraphRecursionError", "ModelCallLimitExceededError", "ToolCallLimitExceededError"}
)
_TIMEOUT_ERRORS = frozenset({"NodeTimeoutError", "WorkflowTimeoutError"})
_CALLER_STOP_NAMES = frozenset(error.__name__ for error in CALLER_STOPS)


UNPARSED_REPLY = "_Exception"
"""The tool a classic LangChain ``AgentExecutor`` runs when its agent's reply does not parse
(``handle_parsing_errors``): it hands the model the parsing error as an observation; no tool
of the agent runs, so it is no tool call (for the adapter and the span import alike)."""

CLASSIC_STOPS = frozenset(
    {"Agent stopped due to iteration limit or time limit.", "Agent stopped due to max iterations."}
)
"""What a classic LangChain ``AgentExecutor`` answers when it stops its agent at
``max_iterations`` or ``max_execution_time`` (``early_stopping_method="force"``, the
default): the run ended at a limit."""


def no_such_tool(name: str, answer: Any) -> bool:
    """Whether ``answer`` is a framework's own answer to a call of a tool ``name`` the agent
    does not have (LlamaIndex's ``Tool <name> not found. ...``): no tool ran, and the call
    failed, though the tool message the model was shown marks no error (for the adapter
    and the span import alike)."""
    return isinstance(answer, str) and answer.startswith(f"Tool {name} not found. ")


def limit_or_timeout(kind: str, message: str) -> RunStatus | None:
    """How a run ended, by the class name (``kind``, qualified or not) and message of the
    exception that ended it, where that says more than an error: ``limit`` for LangGraph's
    recursion limit, LangChain's call-limit middlewares' errors and a LlamaIndex agent's
    iteration limit (a ``WorkflowRuntimeError`` whose message is the only sign);
    ``timeout`` for LangGraph's node timeouts, its step timeout (a plain ``TimeoutError``
    "Timed out": a tool's own socket timeout is a ``TimeoutError`` too, and stays an
    error) and a LlamaIndex workflow's; else ``None``."""
    name = kind.rsplit(".", 1)[-1]
    if name in _LIMIT_ERRORS or (
        name == "WorkflowRuntimeError" and message.startswith("Max iterations of")
    ):
        return RunStatus.LIMIT
    if name in _TIMEOUT_ERRORS or (name == "TimeoutError" and message == "Timed out"):
        return RunStatus.TIMEOUT
    return None


def stopped_by_caller(kind: str) -> bool:
    """Whether an exception of class ``kind`` (qualified or not) is one of
    :data:`CALLER_STOPS`: its run was ``cancelled``, not failed (where only its name is
    known: a span file's exception event)."""
    return kind.rsplit(".", 1)[-1] in _CALLER_STOP_NAMES


def step_thought(reasoning: str | None, text: str | None) -> str | None:
    """The ``thought`` of a model call that asked for tools: the reasoning the model gave
    (:data:`~agenteval_core.REASONING`), then the text it wrote beside its calls."""
    return "\n\n".join(part for part in (reasoning, text) if part) or None


class Unfinished(NamedTuple):
    """A run that paused (or failed), kept for the run that resumes it."""

    trace_id: str
    request: Any
    asked: dict[str, Any] | None
    """What each interrupt the run paused at asked, by the interrupt's id, where the
    framework names them (LangGraph); else ``None``."""


class AlertEvent(NamedTuple):
    """A loop alert on its way through the pump: to the sinks, or to the adapter's refuser
    (which records the refused call on the trace, in order with the run's events)."""

    handle: Callable[[AlertEvent], None]
    alert: LoopAlert


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""Marks an argument that was not given (``None`` is a real output)."""


def _fields(message: Any) -> tuple[Any, ...]:
    """The values a message holds (a dict's, an object's attributes), compared to tell that
    it was changed since it was converted."""
    if type(message) is dict:
        return tuple(message.values())
    return tuple(getattr(message, "__dict__", {}).values())


_Converted = tuple[Any, tuple[Any, ...], Any]
"""A message object, the values it held, and its converted form."""

CONVERTED_CALLS = 4
"""Model calls of a run whose converted messages are kept for its next calls (agents that
take turns in one run each resend their own conversation)."""


def _converted(calls: deque[dict[int, _Converted]], message: Any) -> _Converted | None:
    """The converted form a recent call of the run made of ``message``, if it still holds
    the values it held then."""
    for call in reversed(calls):
        entry = call.get(id(message))
        if entry is not None and entry[0] is message:
            try:
                return entry if entry[1] == _fields(message) else None
            except Exception:  # values that refuse to compare: convert anew
                return None
    return None


class _Marker:
    """Put on the queue by ``flush``: set when everything before it was handled."""

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = object()


class EventPump:
    """A queue of events and the daemon thread that handles them in order.

    An event is a tuple whose first item is the function that handles it (it receives the
    whole tuple). ``put`` is the adapters' hot path: a ``SimpleQueue.put``, which never blocks
    and never raises. Read ``pump.put`` at each call and never keep it: it is renewed after
    ``fork()`` (the child gets a fresh queue and thread, so nothing the parent had queued is
    handled twice) and at close. Events are never dropped (they become the capture); one put
    after :meth:`close` (an agent still running) is handled on the thread that puts it, so
    its run still reaches the evaluator, which accounts for it. Exceptions in a handler are
    logged once per kind and swallowed.
    """

    def __init__(self, *, name: str = "agenteval-pump") -> None:
        self.name = name
        self.handled = 0
        self.errors = 0
        self._logged: set[str] = set()
        # held while events are handled off the pump's thread (after close): one at a time,
        # in order; reentrant, since a handler may put an event of its own
        self._late = threading.RLock()
        self._start()
        renew_after_fork(self)

    def _start(self) -> None:
        self.closed = False
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.put: Callable[[Any], None] = self._queue.put  # the hot path: one C call
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        get = self._queue.get
        while True:
            event = get()
            if event is _STOP:
                self._hand_over()
                return
            self._handle(event)

    def _handle(self, event: Any) -> None:
        if isinstance(event, _Marker):
            event.done.set()
            return
        try:
            event[0](event)
        except Exception as exc:
            self.errors += 1
            kind = f"{type(exc).__name__}:{getattr(event[0], '__qualname__', '?')}"
            if kind not in self._logged:
                self._logged.add(kind)
                logger.warning(
                    "agenteval could not record an event (%s): %s", kind, exc, exc_info=exc
                )
        self.handled += 1

    def _hand_over(self) -> None:
        """The thread stops: from now on each event is handled as it is put, after what an
        agent thread queued meanwhile."""
        with self._late:
            self.put = self._handle_now
            self._drain()

    def _handle_now(self, event: Any) -> None:
        # an adapter that read ``put`` just before the hand-over queued its event: first
        with self._late:
            self._drain()
            self._handle(event)

    def _drain(self) -> None:
        while True:
            try:
                event = self._queue.get_nowait()
            except queue.Empty:
                return
            if event is not _STOP:
                self._handle(event)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event put before this call is handled; False on timeout."""
        if not self._thread.is_alive():
            with self._late:  # closed: what an adapter queued during the hand-over
                self._drain()
            return True
        marker = _Marker()
        self._queue.put(marker)
        return marker.done.wait(timeout)

    def runs_here(self) -> bool:
        """Whether the caller is on the pump's thread (in one of its handlers)."""
        return threading.current_thread() is self._thread

    def _after_fork(self) -> None:
        self._late = threading.RLock()  # a parent thread may have held it
        if not self.closed:  # a fresh queue: what the parent queued is the parent's
            self._start()

    def close(self, timeout: float | None = None) -> None:
        """Handle what is queued, then stop the thread; later events are handled as they
        are put."""
        self.closed = True
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout)


DRAIN_WAIT = 30.0
"""The longest an event given to :meth:`Recorder.put_after_drains` waits for a framework's
pending events (CrewAI's own flush waits as long by default); then it is queued anyway."""


TOOLS_RUNNING = 10_000
"""Tool runs :meth:`Recorder.check_tool_call` keeps for their end at most (a run whose end
never comes goes first)."""


class Recorder:
    """The live path of one evaluator, shared by every adapter attached to it.

    One :class:`EventPump` (one thread) handles the events of every handler, listener and
    instrumentation that records into the evaluator; one :class:`~agenteval_core.LoopGuard`
    checks their tool calls. Alerts are delivered to the evaluator on the pump's thread
    (named ``agenteval-recorder``), whichever thread raised them.

    Adapters use three things: ``pump.put`` (the hot path; keep the pump, not its ``put``,
    which is renewed after a fork and at close), :meth:`assembler` (one per adapter object,
    used only on the pump's thread) and :meth:`check_tool_call` (on the agent's thread,
    before a tool runs, when the adapter stops loops; then :meth:`tool_returned` when it
    ends).
    """

    def __init__(
        self,
        *,
        on_trace: Callable[[Trace], None],
        on_alert: Callable[[LoopAlert], None],
        on_problem: Callable[[str, BaseException, str], None] | None = None,
        guard: LoopGuard | None = None,
    ) -> None:
        self.pump = EventPump(name="agenteval-recorder")
        self.guard = guard if guard is not None else LoopGuard()
        self._on_trace = on_trace
        self._on_alert = on_alert
        self._on_problem = on_problem
        self._drains: list[Callable[[float | None], bool]] = []
        self._waiting_on_drains: threading.Thread | None = None
        """The thread holding the latest event queued by :meth:`put_after_drains`."""
        self._waiting_lock = threading.Lock()
        self._assemblers: weakref.WeakSet[TraceAssembler] = weakref.WeakSet()
        self._running: LatestKept[Hashable, ToolCall] = LatestKept(TOOLS_RUNNING)
        """The calls :meth:`check_tool_call` let run, by the adapter's key of each run,
        until :meth:`tool_returned`."""
        self._running_lock = threading.Lock()
        self.unfinished: OrderedDict[Hashable, Unfinished] = OrderedDict()
        """Runs that paused or failed, for the run that resumes one, by what that run shows
        (see :meth:`TraceAssembler.keep_unfinished`): kept here, for every adapter object
        of the evaluator, since an app may make a handler per request, and the resume comes
        in another request than the pause; the least recently kept are forgotten past
        :data:`UNFINISHED_KEPT`. Used on the pump's thread only."""
        renew_after_fork(self)

    def _after_fork(self) -> None:
        self._waiting_on_drains = None  # its thread is not in the child
        self._waiting_lock = threading.Lock()
        self._running_lock = threading.Lock()
        for assembler in list(self._assemblers):
            assembler.forget_open_runs()  # the parent's, which the parent records

    def drain_before_flush(self, drain: Callable[[float | None], bool]) -> None:
        """Have every :meth:`flush` first call ``drain(timeout)``, which returns False when
        it timed out: for a framework that hands events to its handlers on a thread of its
        own (CrewAI's event bus), so that a flush after a run returned covers that run's
        last events too."""
        self._drains.append(drain)

    def forget_drain(self, drain: Callable[[float | None], bool]) -> None:
        """Stop calling a drain given to :meth:`drain_before_flush` (absent: nothing)."""
        if drain in self._drains:
            self._drains.remove(drain)

    @property
    def put(self) -> Callable[[tuple[Any, ...]], None]:
        """Queue an event ``(handler, *payload)``: never blocks, never raises."""
        return self.pump.put

    def put_after_drains(self, event: tuple[Any, ...]) -> None:
        """Queue an event once the events a framework still has on their way to its handlers
        are queued (the drains of :meth:`drain_before_flush`, waited up to
        :data:`DRAIN_WAIT`): a session's end after a CrewAI kickoff that returned while its
        event bus was still delivering the run's last events. Never blocks: the wait is on a
        thread of its own. Events queued so keep their order."""
        with self._waiting_lock:
            earlier = self._waiting_on_drains
            if not self._drains and (earlier is None or not earlier.is_alive()):
                self.put(event)
                return
            waiting = threading.Thread(
                target=self._put_when_drained,
                args=(event, earlier),
                name="agenteval-after-drains",
                daemon=True,
            )
            self._waiting_on_drains = waiting
            waiting.start()

    def _put_when_drained(self, event: tuple[Any, ...], earlier: threading.Thread | None) -> None:
        self._run_drains(DRAIN_WAIT)
        if earlier is not None:
            earlier.join()
        self.put(event)

    def _wait_for_queued_after_drains(self, timeout: float | None) -> bool:
        """Wait until the events given to :meth:`put_after_drains` so far are queued."""
        waiting = self._waiting_on_drains
        if waiting is None:
            return True
        waiting.join(timeout)
        return not waiting.is_alive()

    def assembler(self, framework: str, *, watch_loops: bool = True) -> TraceAssembler:
        """A trace assembler for one adapter object. With ``watch_loops`` it checks each tool
        call it records with the guard (for adapters that do not check calls before they run)."""
        assembler = TraceAssembler(framework, self, watch_loops=watch_loops)
        self._assemblers.add(assembler)
        return assembler

    def check_tool_call(
        self,
        run: Hashable,
        call: ToolCall,
        *,
        refuse: Callable[[AlertEvent], None],
        stops: bool = True,
        agent: str | None = None,
        lane: Hashable | None = None,
        branches: Branches = (),
        key: Hashable | None = None,
    ) -> LoopAlert | None:
        """Ask the guard about a tool call before it runs, on the agent's thread (a call no
        tool starts for, which the framework answers itself, as the adapter records it).

        Returns an alert when the call closes a loop, or when the guard already refused a
        call of the run; the adapter then refuses the call its framework's way. ``refuse``
        is queued with the alert, so the refusal is recorded on the trace in order with the
        run's events; a new alert also goes to the sinks (once). ``stops``: whether the
        adapter can stop this run as well (False: its looping calls are refused, the run
        goes on, and the alert and the trace say so). ``agent``: the agent the call is made
        for, when the run has several; ``lane``: its lane (:meth:`RunRoots.lane`), when
        agents of the run run at once; ``branches``: the graph steps it is made in
        (:meth:`RunRoots.branches`). ``key``: the adapter's key of the tool's run, to give
        :meth:`tool_returned` when it ends.
        """
        earlier = self.guard.stopped_by(run)
        if earlier is not None:
            # refused now, under the alert that stopped the run: its span starts now
            refusal = earlier.model_copy(update={"calls": [call], "time": time.time()})
            self.put(AlertEvent(refuse, refusal))
            return earlier
        alert = self.guard.observe(
            run, call, started=time.time(), agent=agent, lane=lane, branches=branches
        )
        if alert is None:
            if key is not None:
                with self._running_lock:
                    self._running[key] = call
            return None
        alert.stopped = stops
        self.guard.stop(run, alert)
        self.put(AlertEvent(refuse, alert))
        self.put(AlertEvent(self._alert_event, alert))
        return alert

    def tool_returned(self, key: Hashable, result: Any = None, error: str | None = None) -> None:
        """The tool run ``key`` that :meth:`check_tool_call` let through ended, on the
        agent's thread, with what it gave the model (``result`` as the trace records it, or
        ``error``): the guard reads it, since a call made again that finds something else
        (a file read again after an edit) is the agent seeing its work, not a loop."""
        with self._running_lock:
            call = self._running.pop(key, None)
        if call is not None:
            call.result, call.error = result, error

    def guard_failed(self, exc: BaseException) -> None:
        """An adapter's guard check raised (a bug of ours, kept from the agent): counted in
        the evaluator's ``stats.problems``, and said at WARNING once, since a guard that
        fails cannot stop a loop even with ``stop_on_loop=True``."""
        self._problem("loop guard", exc, "this tool call was not checked for a loop")

    def field_failed(self, what: str, exc: BaseException) -> None:
        """A translator could not read one field of a framework event (an odd value of a
        new framework release): the span is recorded without it; counted in the
        evaluator's ``stats.problems["event field"]`` and said at WARNING once."""
        self._problem(
            "event field", exc, f"{what} was left out of a span (the rest of it was recorded)"
        )

    def _problem(self, kind: str, exc: BaseException, consequence: str) -> None:
        # the evaluator counts it and says it once per kind; a bare recorder says it
        if self._on_problem is not None:
            self._on_problem(kind, exc, consequence)
        else:
            logger.warning(
                "agenteval: %s failed (%s: %s): %s", kind, type(exc).__name__, exc, consequence
            )

    def _alert_event(self, event: AlertEvent) -> None:
        self._on_alert(event.alert)

    def deliver_alert(self, alert: LoopAlert) -> None:
        """Deliver an alert on the pump's thread (from any thread; never blocks)."""
        self.put(AlertEvent(self._alert_event, alert))

    def trace_finished(self, key: Hashable, trace: Trace) -> None:
        """Called by assemblers on the pump's thread: forget the run, hand the trace on."""
        self.guard.forget(key)
        self._on_trace(trace)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event delivered so far (see :meth:`drain_before_flush`) is
        handled; False on timeout."""
        remaining = time_left(timeout)
        delivered = self._run_drains(remaining())
        delivered = self._wait_for_queued_after_drains(remaining()) and delivered
        return self.pump.flush(remaining()) and delivered

    def _run_drains(self, timeout: float | None) -> bool:
        """Wait for the events frameworks have on their way; False when one timed out."""
        remaining = time_left(timeout)
        delivered = True
        for drain in list(self._drains):
            try:
                delivered = drain(remaining()) and delivered
            except Exception as exc:  # the framework's own wait: its failure is not ours
                self._problem("event delivery", exc, "a flush went on without waiting for it")
        return delivered

    def close(self, timeout: float | None = None) -> None:
        """Handle what is queued (the events waiting on drains included), finish the runs
        still going as they stand (see :meth:`TraceAssembler.finish_open_runs`), then stop
        the pump's thread."""
        remaining = time_left(timeout)
        self._wait_for_queued_after_drains(remaining())
        self.pump.put((self._finish_open_runs,))
        self.pump.close(remaining())

    def _finish_open_runs(self, _: tuple[Any, ...]) -> None:
        finished = sum(assembler.finish_open_runs() for assembler in list(self._assemblers))
        if finished:
            logger.warning(
                "agenteval: %d run(s) were still going when the evaluator closed: each is "
                "captured as it stood, with status unfinished (%s), and not scored; what "
                "they do after this is not recorded. Close the evaluator after the agent's "
                "last run",
                finished,
                OPEN_AT_CLOSE,
            )


class RunRoots:
    """Which run (root span) each open span belongs to, which spans run inside a tool, and
    which agents of a run are running (for the lanes of :class:`Lanes`), kept on the
    agent's thread so the guard can be asked before a tool runs. A run's entries go when
    its root ends."""

    def __init__(self) -> None:
        self._roots: dict[Hashable, Hashable] = {}
        self._parents: dict[Hashable, Hashable] = {}
        self._members: dict[Hashable, list[Hashable]] = {}
        self._tools: set[Hashable] = set()  # tool spans, and every span inside one
        self._may_be_agents: set[Hashable] = set()
        # a run's agent spans open now, and its graph's tasks that called a model
        self._agents: dict[Hashable, set[Hashable]] = {}
        self._lanes: dict[Hashable, Lanes] = {}
        self._steps: dict[Hashable, int] = {}  # a graph's tasks: their step's number

    def __len__(self) -> int:
        return len(self._members)

    def enter(
        self,
        key: Hashable,
        parent: Hashable | None,
        *,
        tool: bool = False,
        may_be_agent: bool = False,
        step: int | None = None,
    ) -> Hashable:
        """Record a span starting under ``parent`` (``None`` for a root), a tool's when
        ``tool``, one that is an agent if :meth:`agent_found` says so when
        ``may_be_agent``, a task of its graph's step ``step`` (:data:`GRAPH_STEP`); return
        its root."""
        if tool or parent in self._tools:
            self._tools.add(key)
        if may_be_agent:
            self._may_be_agents.add(key)
        if step is not None:
            self._steps[key] = step
        if parent is None:
            self._members.setdefault(key, [])
            return key
        root = self._roots.get(parent, parent)
        if key not in self._roots:
            self._roots[key] = root
            self._parents[key] = parent
            self._members.setdefault(root, []).append(key)
        return root

    def agent_found(self, key: Hashable | None) -> None:
        """The open span ``key``, entered as one that may be an agent, is one (it runs
        an agent's steps)."""
        if key in self._may_be_agents:
            self._may_be_agents.discard(key)
            self._agents.setdefault(self._roots.get(key, key), set()).add(key)

    def lane(self, key: Hashable) -> Hashable | None:
        """The lane (see :class:`Lanes`) of a call made in the open span ``key``."""
        root = self._roots.get(key, key)
        running = tuple(self._agents.get(root, ()))  # other agent threads add to it
        lanes = self._lanes.get(root)
        if lanes is None:
            if len(running) < 2:
                return None  # one agent at a time so far: the run's lane
            lanes = self._lanes[root] = Lanes()
        agents = frozenset(running)  # those above an open span are open: among them

        def above(key: Hashable | None) -> list[Hashable]:
            return agents_above(key, self._parents.get, agents.__contains__, len(self._parents) + 1)

        return lanes.lane(above(self._parents.get(key)), [above(agent) for agent in running])

    def model_started(self, key: Hashable) -> None:
        """A model call ``key`` of the run's own started (not one a tool makes): the graph's
        tasks it runs in called a model, and run an agent's steps as an agent span does
        (a sub-agent a node runs, with no name to make it one)."""
        if self._steps:
            tasks = (task for _, task in self._steps_above(key))
            self._agents.setdefault(self._roots.get(key, key), set()).update(tasks)

    def branches(self, key: Hashable, asked: bool) -> Branches:
        """The graph steps the open span ``key`` runs in (:data:`Branches`), for a call a
        model asked for when ``asked``."""
        if not self._steps:
            return ()
        running = self._agents.get(self._roots.get(key, key), set())  # those above are open
        return self._steps_above(key, running.__contains__ if asked else None)

    def _steps_above(
        self, key: Hashable, ran_model: Callable[[Hashable], bool] | None = None
    ) -> list[tuple[Hashable, Hashable]]:
        return steps_above(
            key, self._parents.get, self._steps.get, len(self._parents) + 1, ran_model
        )

    def inside_tool(self, parent: Hashable | None) -> bool:
        """Whether a span started under ``parent`` runs inside a tool (the tool's own
        model call, a sub-agent it runs): a model call there asks for none of the run's
        calls."""
        return parent in self._tools

    def exit(self, key: Hashable) -> None:
        """A span ended: a root's run is forgotten; an agent inside a run stops running."""
        self._tools.discard(key)
        self._may_be_agents.discard(key)
        self._steps.pop(key, None)
        if key not in self._members:
            agents = self._agents.get(self._roots.get(key, key))
            if agents is not None:
                agents.discard(key)
            return
        self._agents.pop(key, None)
        self._lanes.pop(key, None)
        for member in self._members.pop(key, ()):
            self._roots.pop(member, None)
            self._parents.pop(member, None)
            self._tools.discard(member)
            self._may_be_agents.discard(member)
            self._steps.pop(member, None)


@dataclass
class _OpenTrace:
    key: Hashable
    trace: Trace
    open_keys: set[Hashable] = field(default_factory=set)
    stood_in: set[str] = field(default_factory=set)
    """Refused calls' spans whose framework stand-in was folded into them."""
    refusing: bool = False
    """The loop guard has refused a call of this run."""
    lanes: Lanes = field(default_factory=Lanes)
    """Which of the run's calls the guard reads as one sequence."""
    ran_model: set[Hashable] = field(default_factory=set)
    """The run's graph tasks (:data:`GRAPH_STEP`) that called a model of the run's own (not
    one a tool called)."""
    last_event: float = 0.0
    """When a span of this run last started or ended (the event's own time)."""
    waiting: str | None = None
    """Why the run waits for an event from outside (a human's answer), while it does."""
    asked: str | None = None
    """What the run last asked a human, until the answer comes."""
    converted: deque[dict[int, _Converted]] = field(
        default_factory=lambda: deque(maxlen=CONVERTED_CALLS)
    )
    """The messages of the run's last model calls, one dict per call, by ``id``: the object
    (kept alive, so no other takes its ``id``), the values it held then, and its converted
    form. Only the last few calls: a middleware that copies the conversation for each call
    would otherwise keep every copy for the whole run."""


@dataclass
class _OpenSpan:
    span: Span
    owner: _OpenTrace
    parent_key: Hashable | None


class TraceAssembler:
    """Builds traces from span starts and ends (called on one thread, the recorder's).

    A span whose parent is unknown starts a new trace and is its root; when the root ends the
    trace is finished, ordered by start time, given its status, and passed on once. Children
    still open then are closed with an error note rather than lost. Ends of unknown spans are
    counted and ignored. Runs that never end are bounded: past ``max_open_runs`` open runs,
    each run that has had no event for ``stale_after`` seconds, least recently active
    first, is finished as it stands, with status ``error`` and the reason. A run still
    active is never cut short, however many are open at once: a server's thousands of live
    runs are not leaks.
    """

    def __init__(
        self,
        framework: str,
        recorder: Recorder,
        *,
        watch_loops: bool = True,
        max_open_runs: int = 10_000,
        stale_after: float = STALE_AFTER,
    ) -> None:
        self.framework = framework
        self.recorder = recorder
        self.watch_loops = watch_loops
        self.max_open_runs = max_open_runs
        self.stale_after = stale_after
        self._spans: dict[Hashable, _OpenSpan] = {}
        # least recently active first: a run moves to the end at each of its events
        self._traces: OrderedDict[Hashable, _OpenTrace] = OrderedDict()
        self.unknown_ends = 0
        self.evicted = 0
        self._finished_at_close: set[Hashable] = set()
        """The open spans of the runs finished at close, and the spans started in them
        since: a run that goes on after the evaluator closed adds nothing to another."""

    def open_traces(self) -> int:
        """How many traces have started and not finished."""
        return len(self._traces)

    def field(self, what: str, extract: Callable[[], _T], default: _T) -> _T:
        """One optional field of a framework event, read under its own guard: when reading
        it raises, the span gets ``default`` for it and the problem is counted (see
        :meth:`Recorder.field_failed`), so an odd field costs that field, never the span."""
        try:
            return extract()
        except Exception as exc:
            self.recorder.field_failed(what, exc)
            return default

    def messages(
        self, parent_key: Hashable | None, messages: list[Any], convert: Callable[[Any], Any]
    ) -> Any:
        """The messages a model call was sent, converted for its span: a message object an
        earlier call of the same run was sent is converted once, and the calls share its
        converted form. Frameworks resend the same objects, the whole conversation at each
        call, so converting each again costs a long run time on the order of its length
        squared. A message that holds another value than it did (a new content, say) is
        converted anew. ``convert`` is given a list of messages and returns the list
        converted."""
        open_span = self._spans.get(parent_key) if parent_key is not None else None
        if open_span is None or not messages:
            return convert(messages)
        calls = open_span.owner.converted
        found = [_converted(calls, message) for message in messages]
        fresh = [message for message, entry in zip(messages, found, strict=True) if entry is None]
        made = convert(fresh) if fresh else []
        if type(made) is not list or len(made) != len(fresh):  # cut short by its budget
            return convert(messages)
        converted = iter(made)
        this_call: dict[int, _Converted] = {}
        sent = []
        for message, entry in zip(messages, found, strict=True):
            if entry is None:
                entry = (message, _fields(message), next(converted))
            this_call[id(message)] = entry
            sent.append(entry[2])
        calls.append(this_call)
        return sent

    def is_root(self, key: Hashable) -> bool:
        """Whether an open span is the root of its trace."""
        open_span = self._spans.get(key)
        return open_span is not None and open_span.owner.key == key

    def trace_of(self, key: Hashable) -> Trace | None:
        """The unfinished trace a span belongs to, if that span is open."""
        open_span = self._spans.get(key)
        return open_span.owner.trace if open_span is not None else None

    def span_of(self, key: Hashable) -> Span | None:
        """An open span, for a framework that learns more about it after its start (an
        inner run found to be an agent once its first step starts)."""
        open_span = self._spans.get(key)
        return open_span.span if open_span is not None else None

    def agent_name_of(self, key: Hashable | None) -> str | None:
        """The agent an open span runs for (its ``gen_ai.agent.name``), if it says."""
        span = self.span_of(key) if key is not None else None
        agent = span.attributes.get(AGENT_NAME) if span is not None else None
        return str(agent) if agent else None

    def start_time_of(self, key: Hashable) -> float | None:
        """When an open span started."""
        open_span = self._spans.get(key)
        return open_span.span.start_time if open_span is not None else None

    def parent_key(self, key: Hashable) -> Hashable | None:
        """The key of an open span's parent (``None`` for a root)."""
        open_span = self._spans.get(key)
        return open_span.parent_key if open_span is not None else None

    def root_key(self, key: Hashable) -> Hashable | None:
        """The key of the root span of the trace an open span belongs to."""
        open_span = self._spans.get(key)
        return open_span.owner.key if open_span is not None else None

    def start_span(
        self,
        key: Hashable,
        parent_key: Hashable | None,
        kind: SpanKind,
        name: str,
        *,
        input: Any = None,
        start_time: float | None = None,
        attributes: dict[str, Any] | None = None,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        tools: list[ToolSpec] | None = None,
        tool_call: ToolCall | None = None,
    ) -> None:
        """Open a span; with no known parent it opens a new trace."""
        if key in self._spans:
            return  # a repeated start: keep the first
        if parent_key in self._finished_at_close:
            self._finished_at_close.add(key)
            return
        parent = self._spans.get(parent_key) if parent_key is not None else None
        owner = self._new_trace(key, input, start_time) if parent is None else parent.owner
        at = start_time if start_time is not None else time.time()
        self._active(owner, at)
        named = attributes.get(AGENT_NAME) if attributes else None
        agent = str(named) if named else None
        if kind is SpanKind.LLM and not self._inside_tool(parent_key):
            # a call after it is the model's asking; a model call a tool makes (its own
            # summariser, a sub-agent) asks for none of the run's calls
            branches = self._branches(parent_key) if parent_key is not None else []
            owner.ran_model.update(task for _, task in branches)  # they run an agent's steps
            if self.watch_loops:  # else the adapter tells the guard itself
                lane = self._lane(owner, parent_key) if parent_key is not None else None
                self.recorder.guard.model_called(owner.key, agent, lane, branches)
        if kind is SpanKind.LLM and parent is not None:
            messages = messages_of(input)
            if messages:  # the conversation so far, resent: held once (see share_conversation)
                share_conversation(messages, owner.trace.spans)
        span = Span(
            id=new_id()[:16],
            parent_id=parent.span.id if parent is not None else None,
            kind=kind,
            name=name,
            input=input,
            start_time=at,
            attributes=attributes or {},
            tool_call=tool_call,
        )
        owner.trace.spans.append(span)
        owner.open_keys.add(key)
        self._spans[key] = _OpenSpan(span, owner, parent_key if parent is not None else None)
        self.annotate(key, session_id=session_id, metadata=metadata, tools=tools)
        if tool_call is not None and self.watch_loops:
            self.watch(key, tool_call, started=span.start_time, agent=agent)
        if parent is None and len(self._traces) > self.max_open_runs:
            self._evict_stale(at)

    def _inside_tool(self, key: Hashable | None) -> bool:
        """Whether the open span ``key``, or one above it, is a tool's."""
        while key is not None:
            open_span = self._spans.get(key)
            if open_span is None:
                return False
            if open_span.span.kind is SpanKind.TOOL:
                return True
            key = open_span.parent_key
        return False

    def watch(
        self,
        key: Hashable,
        call: ToolCall,
        *,
        started: float | None = None,
        agent: str | None = None,
    ) -> None:
        """Check a tool call made in the open span ``key`` (the call's own tool span, or
        the model call that asked for it) with the guard (alert only), for ``agent`` when
        the run has several, in the lane of the agents running then."""
        open_span = self._spans.get(key)
        if open_span is None:
            return
        owner = open_span.owner
        trace = owner.trace
        alert = self.recorder.guard.observe(
            owner.key,
            call,
            trace_id=trace.id,
            session_id=trace.session_id,
            started=started,
            agent=agent,
            lane=self._lane(owner, key),
            branches=self._branches(key, owner.ran_model.__contains__ if call.id else None),
        )
        if alert is not None:
            trace.alerts.append(alert)
            self.recorder._on_alert(alert)  # already on the pump's thread

    def _agents_above(self, key: Hashable | None) -> list[Hashable]:
        """The agent spans at and above the open span ``key``, nearest first, a graph's
        task that called a model among them."""
        spans = self._spans
        return agents_above(
            key,
            lambda above: spans[above].parent_key if above in spans else None,
            lambda above: above in spans and self._runs_agent(spans[above], above),
            len(spans),
        )

    @staticmethod
    def _runs_agent(open_span: _OpenSpan, key: Hashable) -> bool:
        """Whether an open span runs an agent's steps: an agent span, or a graph's task
        that called a model (a sub-agent a node runs, with no name to make it one)."""
        return open_span.span.kind is SpanKind.AGENT or key in open_span.owner.ran_model

    def _branches(
        self, key: Hashable, ran_model: Callable[[Hashable], bool] | None = None
    ) -> Branches:
        """The graph steps the open span ``key`` runs in (:data:`Branches`)."""
        spans = self._spans
        return steps_above(
            key,
            lambda above: spans[above].parent_key if above in spans else None,
            lambda above: spans[above].span.attributes.get(GRAPH_STEP) if above in spans else None,
            len(spans),
            ran_model,
        )

    def _lane(self, owner: _OpenTrace, key: Hashable) -> Hashable | None:
        """The lane (see :class:`Lanes`) of a call made in the open span ``key``."""
        running = [
            self._agents_above(open_key)
            for open_key in owner.open_keys
            if self._runs_agent(self._spans[open_key], open_key)
        ]
        if len(running) < 2 and not owner.lanes.has_own:
            return None  # one agent at a time so far: the run's lane
        return owner.lanes.lane(self._agents_above(key), running)

    def refuse(self, key: Hashable, alert: LoopAlert, *, call: ToolCall | None = None) -> None:
        """Record that the guard refused a tool call: the call's span ends as refused, the
        first refusal's alert goes on the trace, and, when the guard stopped the run
        (``alert.stopped``), the trace's status becomes ``stopped``.

        ``key`` is the refused call's tool span, or, for a framework that opens no span for
        a refused call, the span to open one under. ``call`` is the call as the agent asked
        for it (what the span records).
        """
        open_span = self._spans.get(key)
        if open_span is None:
            return
        owner = open_span.owner
        trace = owner.trace
        if not owner.refusing:
            owner.refusing = True
            alert.trace_id, alert.session_id = trace.id, trace.session_id
            trace.alerts.append(alert)
            if alert.stopped:
                trace.status = RunStatus.STOPPED
                trace.status_reason = f"stopped by the loop guard: {alert.message}"
        if call is not None and open_span.span.kind is SpanKind.TOOL:
            span = open_span.span
            span.name, span.input, span.tool_call = call.name, call.arguments, call
        elif call is not None:
            parent, key = key, ("refused", new_id())
            watching, self.watch_loops = self.watch_loops, False  # the guard already saw it
            self.start_span(
                key,
                parent,
                SpanKind.TOOL,
                call.name,
                input=call.arguments,
                start_time=alert.time,
                tool_call=call,
            )
            self.watch_loops = watching
        if owner.key != key:
            self.end_span(
                key,
                error=f"refused by the loop guard: {alert.message}",
                attributes={GUARD_REFUSED: True},
                end_time=alert.time,
            )

    def fold_into_refusal(self, key: Hashable) -> bool:
        """A framework ran a stand-in for a call the guard refused (CrewAI answers it
        "blocked by hook" through its tool events): the stand-in's open tool span ``key``
        is dropped and its call id goes to the refused call's span, the one record of that
        call. False (nothing changed) when no refused call of the trace matches."""
        open_span = self._spans.get(key)
        stand_in = open_span.span.tool_call if open_span is not None else None
        if open_span is None or stand_in is None:
            return False
        owner = open_span.owner

        def stood_in_for(span: Span) -> bool:
            call = span.tool_call
            return (
                call is not None
                and bool(span.attributes.get(GUARD_REFUSED))
                and span.id not in owner.stood_in
                and (call.name, call.arguments) == (stand_in.name, stand_in.arguments)
                and (call.id is None or stand_in.id is None or call.id == stand_in.id)
            )

        refused = next((span for span in owner.trace.spans if stood_in_for(span)), None)
        if refused is None or refused.tool_call is None:
            return False
        owner.stood_in.add(refused.id)
        refused.tool_call.id = refused.tool_call.id or stand_in.id
        self.discard_span(key)
        return True

    def discard_span(self, key: Hashable) -> None:
        """Drop an open span from its trace, as if it never started: a step its framework
        suspended to run again later (LlamaIndex suspends a step that waits for an event by
        raising in it), or a stand-in for a call recorded elsewhere. Not a run's root."""
        open_span = self._spans.get(key)
        if open_span is None or open_span.owner.key == key:
            return
        open_span.owner.trace.spans.remove(open_span.span)
        del self._spans[key]
        open_span.owner.open_keys.discard(key)

    def shown_to_model(self, key: Hashable, call_id: str, result: Any) -> None:
        """A tool call of the trace ``key`` belongs to raised, its framework handled the
        error, and the model was shown ``result`` (an error message) in its place: that is
        the call's result (its error stays). When a framework retried the call (several
        runs with one id), the model was shown the last run's: a failed run before it keeps
        no result, and a last run that succeeded keeps its own. A call the loop guard
        refused keeps no result, in every framework: the tool never ran."""
        trace = self.trace_of(key)
        if trace is None:
            return
        for span in reversed(trace.spans):
            call = span.tool_call
            if call is None or call.id != call_id or span.attributes.get(GUARD_REFUSED):
                continue
            if call.result is None and call.error:
                call.result = span.output = result
            return

    def mark(self, key: Hashable, status: RunStatus, reason: str | None = None) -> None:
        """Say how the run a span belongs to ended when its framework says so in passing
        (an interrupt waiting for a human, a limit); kept when the run's root ends."""
        trace = self.trace_of(key)
        if trace is not None and trace.status is None:
            trace.status, trace.status_reason = status, reason

    def wait(self, key: Hashable, reason: str, *, question: str | None = None) -> None:
        """Say that the run a span belongs to waits for an event from outside (a human's
        answer), ``reason`` saying for what, having asked ``question``: a run cut short
        meanwhile (the evaluator closing) was paused, ``interrupted``, not unfinished; the
        answer that comes is given to the question (:meth:`human_answered`)."""
        open_span = self._spans.get(key)
        if open_span is not None:
            open_span.owner.waiting = reason
            open_span.owner.asked = question

    def stop_waiting(self, key: Hashable) -> str | None:
        """The run a span belongs to no longer waits (its event came, or it ended): why it
        waited, or ``None`` when it did not."""
        open_span = self._spans.get(key)
        if open_span is None:
            return None
        owner = open_span.owner
        reason, owner.waiting = owner.waiting, None
        return reason

    def keep_unfinished(
        self, link: Hashable, key: Hashable, *, asked: dict[str, Any] | None = None
    ) -> Unfinished | None:
        """Remember the run ``key`` belongs to (it paused, or failed) under ``link``, what a
        run that resumes it shows (a LangGraph thread, the tool call a LlamaIndex run waits
        in), with what each interrupt it paused at ``asked`` by id (added to those it paused
        at already: parallel tasks pause one by one): that run takes up its request and
        names it (:meth:`take_unfinished`), whichever adapter object of the evaluator
        records it (an app may make a handler per request). Returns what is kept."""
        trace = self.trace_of(key)
        if trace is None:
            return None
        kept = self.recorder.unfinished
        earlier = kept.get((self.framework, link))
        if earlier is not None and earlier.trace_id == trace.id and earlier.asked:
            asked = {**earlier.asked, **(asked or {})}
        unfinished = kept[(self.framework, link)] = Unfinished(trace.id, trace.input, asked)
        kept.move_to_end((self.framework, link))
        while len(kept) > UNFINISHED_KEPT:  # runs never resumed
            kept.popitem(last=False)
        return unfinished

    def take_unfinished(self, link: Hashable) -> Unfinished | None:
        """The run kept under ``link``, forgotten here (a run resumes it, or starts afresh
        there), or ``None``."""
        return self.recorder.unfinished.pop((self.framework, link), None)

    def human_answered(
        self, key: Hashable, answer: Any, *, resumed: bool = False, question: str | None = None
    ) -> None:
        """A human answered the run ``key`` belongs to, asked ``question`` (else what the run
        said it asked when it began to wait): in a run that ``resumed`` after a pause for a
        human, its first answer is the one it resumed with (:data:`RESUME`); any other is
        one given while it ran (:data:`HUMAN_ANSWERS`, in order, and what it was asked in
        :data:`HUMAN_QUESTIONS` when known)."""
        open_span = self._spans.get(key)
        if open_span is None:
            return
        owner = open_span.owner
        asked, owner.asked = question or owner.asked, None
        metadata = owner.trace.metadata
        if resumed and RESUME not in metadata:
            metadata[RESUME] = answer
            return
        answers = metadata.setdefault(HUMAN_ANSWERS, [])
        answers.append(answer)
        questions = metadata.get(HUMAN_QUESTIONS)
        if asked is not None or questions is not None:  # the questions, once one is known
            questions = metadata.setdefault(HUMAN_QUESTIONS, [None] * (len(answers) - 1))
            questions.append(asked)

    def request_found(self, key: Hashable, request: Callable[[], Any]) -> None:
        """The request of the run ``key`` belongs to, found after its start (a run that goes
        on from saved state, its request there): kept when the run started without one
        (``request`` is called only then)."""
        trace = self.trace_of(key)
        if trace is not None and trace.input is None and trace.spans[0].input is None:
            trace.input = trace.spans[0].input = request()

    def fail_span(self, key: Hashable, error: BaseException, *, end_time: float | None) -> None:
        """Close a span that raised ``error``. A run whose root ends by its caller's doing
        (:data:`CALLER_STOPS`) is ``cancelled``, as the frameworks that say so in an event
        of their own have it: the run did not fail, nor did it complete."""
        if isinstance(error, CALLER_STOPS) and self.is_root(key):
            self.mark(key, RunStatus.CANCELLED, CANCELLED_BY_CALLER)
        self.end_span(key, error=error_text(error), end_time=end_time)

    def annotate(
        self,
        key: Hashable,
        *,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        tools: list[ToolSpec] | None = None,
    ) -> None:
        """Attach a session id, metadata or available tools to the trace a span belongs to."""
        open_span = self._spans.get(key)
        if open_span is None:
            return
        trace = open_span.owner.trace
        if session_id and not trace.session_id:
            trace.session_id = str(session_id)
        if metadata:
            trace.metadata.update(metadata)
        if tools:
            known = {tool.name for tool in trace.tools}
            trace.tools.extend(tool for tool in tools if tool.name not in known)

    def end_span(
        self,
        key: Hashable,
        *,
        output: Any = UNSET,
        error: str | None = None,
        end_time: float | None = None,
        attributes: dict[str, Any] | None = None,
        requested_tool_calls: list[ToolCall] | None = None,
        thought: str | None = None,
    ) -> None:
        """Close a span; closing a trace's root finishes the trace."""
        open_span = self._spans.pop(key, None)
        if open_span is None:
            self.unknown_ends += 1
            return
        span, owner = open_span.span, open_span.owner
        owner.open_keys.discard(key)
        span.end_time = end_time if end_time is not None else time.time()
        self._active(owner, span.end_time)
        if output is not UNSET:
            span.output = output
        if error is not None:
            span.error = error
        if attributes:
            span.attributes.update(attributes)
        if requested_tool_calls:
            span.requested_tool_calls = requested_tool_calls
        if thought:
            span.thought = thought
        if span.tool_call is not None:
            span.tool_call.result = span.output
            span.tool_call.error = span.error
        if key == owner.key:
            self._finish(owner, span)

    def _new_trace(self, key: Hashable, input: Any, start_time: float | None) -> _OpenTrace:
        owner = _OpenTrace(key, Trace(input=input, framework=self.framework, start_time=start_time))
        self._traces[key] = owner
        return owner

    def _finish(
        self, owner: _OpenTrace, root: Span, note: str = "not ended before its run ended"
    ) -> None:
        for child_key in list(owner.open_keys):
            child = self._spans.pop(child_key).span
            child.error = child.error or note
            child.end_time = child.end_time or root.end_time
            if child.tool_call is not None:  # the call's one record says it never returned
                child.tool_call.error = child.error
        owner.open_keys.clear()
        self._traces.pop(owner.key, None)
        trace = owner.trace
        trace.spans.sort(key=lambda s: s.start_time or 0.0)
        # a run paused for a human has no final answer yet (what it said so far is on its
        # spans): its output would be scored as one
        trace.output = None if trace.status is RunStatus.INTERRUPTED else root.output
        trace.error = root.error
        trace.end_time = root.end_time
        if trace.start_time is None:
            trace.start_time = root.start_time
        if trace.status is None:
            trace.status, trace.status_reason = trace.ended_status()
        self.recorder.trace_finished(owner.key, trace)

    def _active(self, owner: _OpenTrace, at: float) -> None:
        # an open span's run is open: its trace is always in _traces here
        owner.last_event = max(owner.last_event, at)
        self._traces.move_to_end(owner.key)

    def _evict_stale(self, now: float) -> None:
        """Finish runs with no event for ``stale_after`` seconds, least recently active
        first, until at most ``max_open_runs`` are open or the next one is still active."""
        while len(self._traces) > self.max_open_runs:
            owner = next(iter(self._traces.values()))
            if now - owner.last_event < self.stale_after:
                return
            self._evict(owner)

    def forget_open_runs(self) -> None:
        """Drop the runs open now without finishing them (in a forked child: they are the
        parent's, and finishing them at the child's close would capture them twice)."""
        self._traces.clear()
        self._spans.clear()

    def finish_open_runs(self) -> int:
        """Finish every run still open as it stands, with status ``unfinished`` and the
        reason :data:`OPEN_AT_CLOSE` (the evaluator is closing: a run that never ends before
        the process exits would otherwise be lost whole, the calls it had made included).
        Later events of those runs are ignored. Returns how many runs were finished."""
        owners = list(self._traces.values())
        for owner in owners:
            self._finished_at_close.update(owner.open_keys)
            self._cut_short(owner, OPEN_AT_CLOSE)
        return len(owners)

    def _evict(self, owner: _OpenTrace) -> None:
        self.evicted += 1
        self._cut_short(owner, "evicted: the run never ended")

    def _cut_short(self, owner: _OpenTrace, reason: str) -> None:
        """Finish a run that has not ended, as it stands: status ``unfinished`` (unless its
        framework said how it ended already, or it was waiting for a human: ``interrupted``),
        ``reason`` on the spans still open."""
        root = self._spans[owner.key].span if owner.key in self._spans else owner.trace.spans[0]
        if owner.trace.status is None and owner.waiting is not None:
            owner.trace.status, owner.trace.status_reason = RunStatus.INTERRUPTED, owner.waiting
        elif owner.trace.status is None:
            owner.trace.status, owner.trace.status_reason = RunStatus.UNFINISHED, reason
        root.end_time = root.end_time or time.time()
        self._spans.pop(owner.key, None)
        owner.open_keys.discard(owner.key)
        self._finish(owner, root, note=reason)
