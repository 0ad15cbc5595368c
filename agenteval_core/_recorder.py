"""Recording framework events off the agent's thread, and assembling them into traces.

Adapters put one tuple per callback on an :class:`EventPump` (a lock-free queue put, nothing
else) and return. The pump's thread translates those events into :class:`TraceAssembler`
calls, which build spans and hand each finished trace on.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from ._schema import Span, SpanKind, ToolCall, ToolSpec, Trace, new_id

__all__ = ["UNSET", "EventPump", "ToolStart", "TraceAssembler"]

logger = logging.getLogger("agenteval")


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""Marks an argument that was not given (``None`` is a real output)."""


class _Marker:
    """Put on the queue by ``flush``: set when everything before it was handled."""

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = object()


class EventPump:
    """A queue of framework events and the daemon thread that handles them in order.

    ``put`` is the adapters' hot path: a ``SimpleQueue.put``, which never blocks and never
    raises. Exceptions in ``handle`` are logged (once per kind of error) and swallowed.
    """

    def __init__(self, handle: Callable[[tuple[Any, ...]], None], *, name: str = "agenteval-pump"):
        self._handle = handle
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.put = self._queue.put  # bound once: the hot path is a single C call
        self.handled = 0
        self.errors = 0
        self._logged: set[str] = set()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        get = self._queue.get
        while True:
            event = get()
            if event is _STOP:
                return
            if isinstance(event, _Marker):
                event.done.set()
                continue
            try:
                self._handle(event)
            except Exception as exc:
                self.errors += 1
                kind = f"{type(exc).__name__}:{event[0] if event else ''}"
                if kind not in self._logged:
                    self._logged.add(kind)
                    logger.warning(
                        "agenteval could not record an event (%s): %s", kind, exc, exc_info=exc
                    )
            self.handled += 1

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event put before this call is handled; False on timeout."""
        if not self._thread.is_alive():
            return True
        marker = _Marker()
        self._queue.put(marker)
        return marker.done.wait(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Handle what is queued, then stop the thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout)


@dataclass(frozen=True)
class ToolStart:
    """A tool call that has just started, for live loop detection."""

    trace_key: Hashable
    trace_id: str
    session_id: str | None
    span_key: Hashable
    tool_call: ToolCall
    time: float


@dataclass
class _OpenTrace:
    key: Hashable
    trace: Trace
    open_keys: set[Hashable] = field(default_factory=set)


@dataclass
class _OpenSpan:
    span: Span
    owner: _OpenTrace


class TraceAssembler:
    """Builds traces from span starts and ends (called on one thread, the pump's).

    A span whose parent is unknown starts a new trace and is its root; when the root ends the
    trace is finished, ordered by start time, and passed to ``on_trace`` once. Children still
    open then are closed with an error note rather than lost. Ends of unknown spans are
    counted and ignored. At most ``max_open_runs`` spans stay open: past that the oldest
    unfinished trace is finished as it stands, marked as evicted.
    """

    def __init__(
        self,
        framework: str,
        on_trace: Callable[[Trace], None],
        *,
        on_tool_start: Callable[[ToolStart], None] | None = None,
        max_open_runs: int = 10_000,
    ) -> None:
        self.framework = framework
        self.on_trace = on_trace
        self.on_tool_start = on_tool_start
        self.max_open_runs = max_open_runs
        self._spans: dict[Hashable, _OpenSpan] = {}
        self._traces: dict[Hashable, _OpenTrace] = {}
        self.unknown_ends = 0
        self.evicted = 0

    def open_traces(self) -> int:
        """How many traces have started and not finished."""
        return len(self._traces)

    def is_root(self, key: Hashable) -> bool:
        """Whether an open span is the root of its trace."""
        open_span = self._spans.get(key)
        return open_span is not None and open_span.owner.key == key

    def trace_of(self, key: Hashable) -> Trace | None:
        """The unfinished trace a span belongs to, if that span is open."""
        open_span = self._spans.get(key)
        return open_span.owner.trace if open_span is not None else None

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
        parent = self._spans.get(parent_key) if parent_key is not None else None
        owner = self._new_trace(key, input, start_time) if parent is None else parent.owner
        span = Span(
            id=new_id()[:16],
            parent_id=parent.span.id if parent is not None else None,
            kind=kind,
            name=name,
            input=input,
            start_time=start_time if start_time is not None else time.time(),
            attributes=attributes or {},
            tool_call=tool_call,
        )
        owner.trace.spans.append(span)
        owner.open_keys.add(key)
        self._spans[key] = _OpenSpan(span, owner)
        self.annotate(key, session_id=session_id, metadata=metadata, tools=tools)
        if tool_call is not None and self.on_tool_start is not None:
            self.on_tool_start(
                ToolStart(
                    trace_key=owner.key,
                    trace_id=owner.trace.id,
                    session_id=owner.trace.session_id,
                    span_key=key,
                    tool_call=tool_call,
                    time=span.start_time or time.time(),
                )
            )
        if len(self._spans) > self.max_open_runs:
            self._evict_oldest()

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
        owner.open_keys.clear()
        self._traces.pop(owner.key, None)
        trace = owner.trace
        trace.spans.sort(key=lambda s: s.start_time or 0.0)
        trace.output = root.output
        trace.error = root.error
        trace.end_time = root.end_time
        if trace.start_time is None:
            trace.start_time = root.start_time
        self.on_trace(trace)

    def _evict_oldest(self) -> None:
        owner = next(iter(self._traces.values()))
        root = self._spans[owner.key].span if owner.key in self._spans else owner.trace.spans[0]
        self.evicted += 1
        root.error = root.error or "evicted: the run never ended"
        root.end_time = root.end_time or time.time()
        self._spans.pop(owner.key, None)
        owner.open_keys.discard(owner.key)
        self._finish(owner, root, note="evicted: the run never ended")
