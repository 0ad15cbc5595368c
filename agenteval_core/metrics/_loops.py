"""Loops inside one run: repeated identical tool calls and short cycles.

One :class:`LoopGuard` (the evaluator's) is asked about each tool call before the tool runs,
by every adapter, so the thresholds and patterns are the same in every framework; the guard
only decides, and the adapter stops the run its framework's way. The ``tool_call_loops``
metric replays a finished run's calls through the same patterns, so the score agrees with
what the live alert saw.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..schema._trace import (
    GRAPH_STEP,
    TOOL_NOT_RUN,
    EvalCase,
    LoopAlert,
    Span,
    SpanKind,
    ToolCall,
    Trace,
    tasks_apart,
)
from ._protocol import Metric, MetricKind, Score, no_calls_to_score, no_trace_to_check
from ._registry import register_metric

__all__ = [
    "Branches",
    "Lanes",
    "LoopGuard",
    "TaskSteps",
    "ToolCallLoops",
    "agents_above",
    "canonical_call",
    "identity_arguments",
    "is_handoff",
    "steps_above",
]


HANDOFF_PREFIXES = ("transfer_to_", "transfer_back_to_")
"""How handoff tools are named in langgraph-supervisor and langgraph-swarm (and the OpenAI
Agents SDK): ``transfer_to_<agent>``, with no arguments, so every handoff to one agent is the
same call."""


HANDOFF_TOOL = "handoff"
"""How a LlamaIndex ``AgentWorkflow`` names its handoff tool: ``handoff(to_agent, reason)``,
the reason in the model's words, new at each handoff."""


def canonical_call(call: ToolCall) -> tuple[str, str]:
    """A tool call's identity for loop detection: its name and sorted-key JSON arguments
    (:func:`identity_arguments`)."""
    return call.name, json.dumps(identity_arguments(call), sort_keys=True, default=str)


def identity_arguments(call: ToolCall) -> dict[str, Any]:
    """The arguments that make ``call`` the call it is: all of them, but a LlamaIndex
    handoff's ``reason``, the model's words for the same handoff (an agent handing the same
    request back and forth, a new reason each time, made a new call each time, and the loop
    was never seen)."""
    if call.name == HANDOFF_TOOL and "to_agent" in call.arguments:
        return {"to_agent": call.arguments["to_agent"]}
    return call.arguments


def is_handoff(call: ToolCall) -> bool:
    """Whether ``call`` hands the run to another agent: ``transfer_to_<agent>`` and
    ``transfer_back_to_<agent>`` (:data:`HANDOFF_PREFIXES`), LlamaIndex's ``handoff``."""
    return call.name.startswith(HANDOFF_PREFIXES) or (
        call.name == HANDOFF_TOOL and "to_agent" in call.arguments
    )


@dataclass
class _Lane:
    """The calls of one lane of a run (see :class:`Lanes`), in the order they started:
    each one's identity, where each identity was made, and for each call where the same
    call was made before it (-1: never)."""

    signatures: list[tuple[str, str]] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    positions: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    previous: list[int] = field(default_factory=list)
    returned: list[tuple[str, str] | None] = field(default_factory=list)
    news: dict[int, bool] = field(default_factory=dict)

    def add(self, call: ToolCall, signature: tuple[str, str]) -> None:
        made = self.positions.setdefault(signature, [])
        self.previous.append(made[-1] if made else -1)
        made.append(len(self.calls))
        self.signatures.append(signature)
        self.calls.append(call)
        self.returned.append(None)

    def went_on_after(self, start: int) -> bool:
        """Whether a call after the one at ``start`` returned other than the same call
        did before it (its incidental values aside: :func:`_differ_beyond_incidentals`):
        the run found something new there (a file read again after an edit, a listing
        after a write, a status that moved on), so the calls since are the agent seeing
        what its work did, not going round in circles. The call at
        ``start`` may be such a call itself: it starts what follows. The last call is about
        to run, so what it returns is not read (the live guard cannot know it yet), and a
        result not known yet (a call still running) counts as unchanged."""
        for index in range(len(self.calls) - 2, start, -1):
            before = self.previous[index]
            if before >= 0 and self._found_news(index, before):
                return True
        return False

    def _found_news(self, index: int, before: int) -> bool:
        news = self.news.get(index)
        if news is None:
            now, then = self._returned(index), self._returned(before)
            if now is None or then is None:
                return False  # not known yet: asked again once it is
            news = self.news[index] = now != then and (
                now[0] != then[0] or _differ_beyond_incidentals(then[1], now[1])
            )
        return news

    def _returned(self, index: int) -> tuple[str, str] | None:
        known = self.returned[index]
        if known is None:  # read once known: a call's result arrives after it is asked
            known = self.returned[index] = _returned(self.calls[index])
        return known


Branches = Sequence[tuple[Hashable, Hashable]]
"""The graph steps a call was made in, nearest first, each as the step's key and the task
of it that made the call: tasks of one step ran side by side (:data:`GRAPH_STEP`)."""


@dataclass(frozen=True)
class _Asked:
    """A call run since its agent's last model call: its identity, the agent it ran for
    (``None``: not said), its lane (:class:`Lanes`) and the graph steps it was made in
    (:data:`Branches`)."""

    signature: tuple[str, str]
    agent: str | None
    lane: Hashable | None
    branches: Branches


@dataclass
class _RunCalls:
    lanes: dict[Hashable, _Lane] = field(default_factory=dict)
    seen: set[tuple[str, str]] = field(default_factory=set)
    """Every call identity the run has made, in any lane."""
    handoffs: dict[tuple[str, str], list[ToolCall]] = field(default_factory=dict)
    """Each handoff's calls since the run last made a call new to it."""
    alerted: set[Any] = field(default_factory=set)
    stopped_by: LoopAlert | None = None
    since_model_call: dict[str, _Asked] = field(default_factory=dict)
    """Each call id run since its agent's last model call, and where it was made."""
    made_in: dict[tuple[Hashable, tuple[str, str]], Counter[Hashable]] = field(default_factory=dict)
    """For each step of a graph (:data:`Branches`) and call identity, how many times each
    of the step's tasks made the call."""


class Lanes:
    """Which of a run's tool calls are read as one sequence by the loop patterns.

    Agents that run at once (a graph's parallel branches, sub-agents a fan-out sends,
    CrewAI's ``async_execution`` tasks) each make their own calls: read as one sequence,
    two pollers each checking their own job twice close a cycle neither made, and three
    workers each reading the same rules once repeat a call none of them repeated. An agent
    span found open beside another that is neither above nor below it has a lane of its
    own from then on (what it called before, alone, stays where it was); a call is in the
    lane of the nearest agent span above it that has one, else in the run's (``None``).
    Agents that run one after another share the run's lane, so a worker sent back to redo
    what it did is still a loop. One per run; the live guard and the metric read lanes
    the same way.
    """

    def __init__(self) -> None:
        self._own: set[Hashable] = set()

    @property
    def has_own(self) -> bool:
        """Whether an agent of the run has had a lane of its own yet."""
        return bool(self._own)

    def lane(
        self, above: Sequence[Hashable], running: Sequence[Sequence[Hashable]]
    ) -> Hashable | None:
        """The lane of a call made under the agent spans ``above`` (nearest first) while
        the agent spans ``running`` are open, each given as itself followed by the agent
        spans above it."""
        for index, line in enumerate(running):
            for other in running[index + 1 :]:
                if line[0] not in other and other[0] not in line:  # beside each other
                    self._own.update((line[0], other[0]))
        return next((agent for agent in above if agent in self._own), None)


def agents_above(
    key: Hashable | None,
    parent_of: Callable[[Hashable], Hashable | None],
    is_agent: Callable[[Hashable], bool],
    most: int,
) -> list[Hashable]:
    """The agent spans at and above span ``key``, nearest first, as :meth:`Lanes.lane`
    reads them: ``parent_of`` walks up, ``is_agent`` tells an agent span; at most ``most``
    steps (parents that name each other, in broken events or files, end)."""
    line = []
    for _ in range(most):
        if key is None:
            break
        if is_agent(key):
            line.append(key)
        key = parent_of(key)
    return line


class TaskSteps:
    """The tasks one run starts (LangGraph's functional API: each ``@task`` an
    ``@entrypoint`` calls) as the steps of a graph (:data:`GRAPH_STEP`), where the framework
    says no step and tasks started together look as tasks called one after another do. A
    task called with other input than its caller's earlier tasks is other work beside them,
    step 0 (a map: three summarisers, each reading the style guide once); one called again
    with the same input does the same work again, a step later (a poll), unless its last
    run raised: then it is that run again (a retry policy's), at its step, so the calls the
    failed run made and the retry made again are read as one call's runs. Thread-safe:
    tasks start on threads of their own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._called: dict[Hashable, Counter[tuple[str, int]]] = {}
        self._running: dict[Hashable, tuple[Hashable, tuple[str, int]]] = {}  # run → its task

    def step(self, caller: Hashable, name: str, inputs: Any, run: Hashable) -> int:
        """The step of task ``name`` started by ``caller`` with ``inputs`` (JSON values) as
        the run ``run``."""
        given = json.dumps(without_call_ids(inputs), sort_keys=True, default=str)
        called = (name, hash(given))
        with self._lock:
            counts = self._called.setdefault(caller, Counter())
            step = counts[called]
            counts[called] += 1
            self._running[run] = (caller, called)
        return step

    def ended(self, run: Hashable, *, raised: bool = False) -> None:
        """``run`` ended (it ``raised``), and the tasks it started with it."""
        with self._lock:
            self._called.pop(run, None)
            task = self._running.pop(run, None)
            if task is not None and raised:
                caller, called = task
                counts = self._called.get(caller)
                if counts is not None and counts[called] > 0:
                    counts[called] -= 1  # called again with this input: run again


def without_call_ids(value: Any) -> Any:
    """``value`` (JSON values) with the id of each tool call in it left out (``{"name",
    "args", "id"}``): a model gives a call a new id each time it asks for it, and a task
    that runs the call the model asked for again does the same work again."""
    if isinstance(value, list):
        return [without_call_ids(item) for item in value]
    if not isinstance(value, dict):
        return value
    call = {"name", "args", "id"} <= value.keys()
    return {k: without_call_ids(v) for k, v in value.items() if not (call and k == "id")}


def steps_above(
    key: Hashable | None,
    parent_of: Callable[[Hashable], Hashable | None],
    step_of: Callable[[Hashable], Any],
    most: int,
    ran_model: Callable[[Hashable], bool] | None = None,
) -> list[tuple[Hashable, Hashable]]:
    """The graph steps span ``key`` runs in (:data:`Branches`), nearest first:
    ``parent_of`` walks up, ``step_of`` gives a task span's step number (``None`` for other
    spans); a step's key is its number and the task's parent; at most ``most`` steps up.

    ``ran_model``, given for a call a model asked for, tells a task that called a model of
    the run's own (not one a tool called); one that did not only ran a call a model
    elsewhere asked for (``create_agent`` runs each call of a reply as a task of one step)
    and is left out: the calls a model asked for at once are read as in every framework."""
    found: list[tuple[Hashable, Hashable]] = []
    for _ in range(most):
        if key is None:
            break
        parent = parent_of(key)
        step = step_of(key)
        if step is not None and (ran_model is None or ran_model(key)):
            found.append(((parent, step), key))
        key = parent
    return found


def _beside(run: _RunCalls, branches: Branches, signature: tuple[str, str]) -> bool:
    """Record a call made in the tasks ``branches``; whether another task of one of those
    steps, running beside this one, made it as many times already: the same call asked for
    side by side (three summarisers each reading the style guide once), not made again."""
    beside = False
    for step, task in branches:
        made = run.made_in.setdefault((step, signature), Counter())
        made[task] += 1
        if any(count >= made[task] for other, count in made.items() if other != task):
            beside = True
    return beside


def _returned(call: ToolCall) -> tuple[str, str] | None:
    """What a call returned, its error included; ``None`` when not known, or for a handoff,
    whose answer says who took the run over (LlamaIndex's repeats the model's reason), no
    news of the world."""
    if is_handoff(call):
        return None
    if call.error is not None:
        return ("error", call.error)
    if call.result is None:
        return None
    return ("result", json.dumps(call.result, sort_keys=True, default=str))


_INCIDENTAL = re.compile(
    # a time of day to the second, its date too in an ISO 8601 timestamp (or alone, as in
    # an HTTP date)
    r"(?:\d{4}-\d{2}-\d{2}[T ])?\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    # a Unix time in seconds, milli-, micro- or nanoseconds (2001 to 2033)
    r"|(?<![\w.])1\d{9}(?:\d{3}){0,3}(?:\.\d+)?(?![\w.])"
    # an object's address in its repr ("<Connection object at 0x7f3a2b1c4d50>")
    r"|(?<!\w)0x[0-9a-fA-F]{8,}(?!\w)"
    # a UUID
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    # an identifier of 16 or more letters and digits, both (a request id, a hash, an etag)
    r"|(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[\w-]{16,}(?![\w-])"
)
_LEFT_OUT = "\x00"
_READ_AT_MOST = 65_536
"""The most characters of two results, where they differ, read for incidental values: a
larger difference is news as written (the regular expression reads ~10 MB/s, and the live
guard reads on the agent's thread with ``stop_on_loop``)."""
_TOKEN = re.compile(r"[\w:.+-]*")
"""The characters the values :data:`_INCIDENTAL` finds are made of (and the text around
them that decides whether they are one)."""
_BLOCK = 4096


def _differ_beyond_incidentals(then: str, now: str) -> bool:
    """Whether two results as written (JSON, or an error's text) differ in more than the
    values that change on every call of a tool for reasons of its own: times to the second
    (a response's ``checked_at``, an HTTP date), Unix times, objects' addresses in their
    reprs, UUIDs and long identifiers of letters and digits (a request id, a hash). A status
    that stays "processing" while the response's timestamp and request id change is nothing
    new; a status that moves on, a count, a date or a new text is. A result that is nothing
    but such a value (a tool that tells the time, or makes an id) is read whole: there the
    value is the answer. Only the span where the two differ is read (widened to whole
    values), so a large answer that changed one timestamp costs what that span does."""
    prefix = _common_prefix(then, now)
    suffix = _common_prefix(then[prefix:][::-1], now[prefix:][::-1])
    # widened to whole values (a timestamp's date and time are one, across a space): the
    # two agree before and after the span, so both are widened alike
    start = _value_start(then, max(0, prefix - 40))
    end_then = _value_end(then, min(len(then), len(then) - suffix + 40))
    end_now = _value_end(now, min(len(now), len(now) - suffix + 40))
    if max(end_then, end_now) - start > _READ_AT_MOST:
        return True
    left_then = _INCIDENTAL.sub(_LEFT_OUT, then[start:end_then])
    left_now = _INCIDENTAL.sub(_LEFT_OUT, now[start:end_now])
    return left_then != left_now or _bare(then) or _bare(now)


def _bare(text: str) -> bool:
    """Whether a result is nothing but one incidental value (the time, a new id)."""
    return _INCIDENTAL.fullmatch(text.strip('"')) is not None


def _common_prefix(first: str, second: str) -> int:
    """How many characters two texts begin with alike (compared a block at a time)."""
    shorter, at = min(len(first), len(second)), 0
    while at < shorter:
        end = min(at + _BLOCK, shorter)
        if first[at:end] != second[at:end]:
            break
        at = end
    else:
        return shorter
    low, high = at, end - 1  # the first character that differs is in [low, high]
    while low < high:
        middle = (low + high) // 2
        if first[low : middle + 1] == second[low : middle + 1]:
            low = middle + 1
        else:
            high = middle
    return low


def _value_start(text: str, at: int) -> int:
    """Where the value ``at`` is in begins (a few hundred characters back at most)."""
    floor = max(0, at - 256)
    while at > floor and (text[at - 1].isalnum() or text[at - 1] in "_:.+-"):
        at -= 1
    return at


def _value_end(text: str, at: int) -> int:
    """Where the value ``at`` is in ends."""
    matched = _TOKEN.match(text, at)
    return matched.end() if matched else at


class LoopGuard:
    """Watches each run's tool calls and reports a loop the moment a call closes one.

    ``repeated_call``: a call (same tool, same canonical arguments) reaches
    ``repeat_threshold`` occurrences in one run since the run last found something new (a
    call that returned other than the same call before it starts the counts again: a file
    read again after an edit, a status that moved on between two waits, is the agent
    seeing its work; the guard reads what each call returned from the call it was given,
    which the adapters fill in when the tool ends);
    a handoff (:func:`is_handoff`) with
    no call new to the run between them (a supervisor that hands each part of a task to the
    same worker, which makes new calls each time, delegates; it does not loop). ``cycle``:
    the last ``cycle_repeats`` × L calls are one sequence of L ≥ 2 distinct calls repeated
    (L ≤ ``max_cycle_length``), with nothing new found among them. Both are read in the
    call's lane (:class:`Lanes`: the calls of agents running at once are apart), handoffs
    across the run. Each loop is reported once per run. A call run again under its id
    with no model call of its agent in between (:meth:`model_called`; another agent of the
    run may call its model meanwhile) is the same call, its framework's retry (as in
    :meth:`Trace.tool_calls`), and counts once. A call the tasks of one graph step made side by side
    (:data:`Branches`), none seeing what the others found, counts as many times as the
    task that made it most. State is per run and dropped by :meth:`forget` when the run
    ends; thread-safe.
    """

    def __init__(
        self, *, repeat_threshold: int = 3, cycle_repeats: int = 2, max_cycle_length: int = 3
    ) -> None:
        if repeat_threshold < 2 or cycle_repeats < 2 or max_cycle_length < 2:
            raise ValueError("repeat_threshold, cycle_repeats and max_cycle_length must be >= 2")
        self.repeat_threshold = repeat_threshold
        self.cycle_repeats = cycle_repeats
        self.max_cycle_length = max_cycle_length
        self._runs: dict[Hashable, _RunCalls] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many runs the guard holds state for."""
        return len(self._runs)

    def observe(
        self,
        run: Hashable,
        call: ToolCall,
        *,
        trace_id: str | None = None,
        session_id: str | None = None,
        started: float | None = None,
        agent: str | None = None,
        lane: Hashable | None = None,
        branches: Branches = (),
    ) -> LoopAlert | None:
        """Record a tool call about to run in ``run`` (for ``agent``, when the run has
        several; in ``lane``, from :class:`Lanes`, when agents of the run run at once; in
        the graph steps' tasks ``branches``); return an alert if it closes a loop."""
        signature = canonical_call(call)
        with self._lock:
            calls = self._runs.get(run)
            if calls is None:
                calls = self._runs[run] = _RunCalls()
            if call.id:
                earlier = calls.since_model_call.get(call.id)
                if earlier is not None and earlier.signature == signature:
                    return None  # its framework runs the call again: no call of the agent's
                calls.since_model_call[call.id] = _Asked(signature, agent, lane, branches)
            if branches and _beside(calls, branches, signature):
                return None  # made beside another task's call: one call of the run's
            own = calls.lanes.get(lane)
            if own is None:
                own = calls.lanes[lane] = _Lane()
            own.add(call, signature)
            if signature not in calls.seen:  # new work since the handoffs before it
                calls.seen.add(signature)
                calls.handoffs.clear()
            if is_handoff(call):
                calls.handoffs.setdefault(signature, []).append(call)
            found = self._repeat(calls, own, lane, signature) or self._cycle(calls, own, lane)
        if found is None:
            return None
        pattern, count, looped, message = found
        return LoopAlert(
            session_id=session_id,
            trace_id=trace_id if trace_id is not None else str(run),
            pattern=pattern,
            count=count,
            calls=looped,
            message=message,
            time=time.time(),
            call_started=started,
        )

    def _repeat(
        self, run: _RunCalls, lane: _Lane, key: Hashable | None, signature: tuple[str, str]
    ) -> tuple[Any, int, list[ToolCall], str] | None:
        handoffs = run.handoffs.get(signature)
        alert: Hashable
        if handoffs is not None:  # a handoff's: those since the run's last new call
            calls, alert = handoffs, signature
        else:
            made = lane.positions[signature][-self.repeat_threshold :]
            if len(made) < self.repeat_threshold or lane.went_on_after(made[0]):
                return None
            calls, alert = [lane.calls[index] for index in made], (key, signature)
        if len(calls) < self.repeat_threshold or alert in run.alerted:
            return None
        run.alerted.add(alert)
        message = f"{signature[0]} called {len(calls)} times with the same arguments {signature[1]}"
        return "repeated_call", len(calls), list(calls), message

    def _cycle(
        self, run: _RunCalls, lane: _Lane, key: Hashable | None
    ) -> tuple[Any, int, list[ToolCall], str] | None:
        signatures = lane.signatures
        for length in range(2, self.max_cycle_length + 1):
            span = length * self.cycle_repeats
            if len(signatures) < span:
                break
            tail = signatures[-span:]
            pattern = tail[:length]
            if len(set(pattern)) < length or tail != pattern * self.cycle_repeats:
                continue
            if lane.went_on_after(len(signatures) - span):
                return None  # so did every longer cycle, whose calls include these
            # the same cycle read from another starting point is the same loop
            alert = ("cycle", key, frozenset(pattern))
            if alert in run.alerted:
                return None
            run.alerted.add(alert)
            names = " → ".join(name for name, _ in pattern)
            message = f"cycle {names} repeated {self.cycle_repeats} times"
            return "cycle", self.cycle_repeats, lane.calls[-span:], message
        return None

    def model_called(
        self,
        run: Hashable,
        agent: str | None = None,
        lane: Hashable | None = None,
        branches: Branches = (),
    ) -> None:
        """A model call of ``run`` started (for ``agent``, when the run has several; in
        ``lane`` when agents of the run run at once; in the graph steps' tasks
        ``branches``): a call of that agent after it is the model's asking, a call of its
        own even under an id it had before (a model server that reuses ids). The model call
        of another agent running beside it (of another name, or in another lane: two agents
        of one name sent at once), or one made in another task of a graph step the call's
        task ran in, leaves its calls' retries as they are; a model call that names no
        agent and has no lane ends every other call's."""
        with self._lock:
            calls = self._runs.get(run)
            if calls is not None:
                calls.since_model_call = {
                    call_id: asked
                    for call_id, asked in calls.since_model_call.items()
                    if (agent is not None and asked.agent is not None and asked.agent != agent)
                    or (lane is not None and asked.lane is not None and asked.lane != lane)
                    or tasks_apart(branches, asked.branches)
                }

    def stop(self, run: Hashable, alert: LoopAlert) -> None:
        """Mark a run as stopped by ``alert``: :meth:`stopped_by` answers for it from now on."""
        with self._lock:
            calls = self._runs.get(run)
            if calls is not None:
                calls.stopped_by = alert

    def stopped_by(self, run: Hashable) -> LoopAlert | None:
        """The alert that stopped a run, if the guard stopped it."""
        calls = self._runs.get(run)
        return calls.stopped_by if calls is not None else None

    def forget(self, run: Hashable) -> None:
        """Drop a finished run's state."""
        with self._lock:
            self._runs.pop(run, None)


def call_lanes(trace: Trace) -> dict[int, Hashable | None]:
    """Each tool call's lane in a finished run (:class:`Lanes`, read as the live guard read
    them: at each call, from the agent spans open then, a graph's task that called a model
    among them), by the ``id`` of each span's call; empty when fewer than two ran (every
    call is in the run's lane)."""
    thinking = _tasks_that_called_a_model(trace)
    agents = [span for span in trace.spans if span.kind is SpanKind.AGENT or span.id in thinking]
    if len(agents) < 2:
        return {}
    parent: dict[Hashable, Hashable | None] = {span.id: span.parent_id for span in trace.spans}
    agent_ids: set[Hashable] = {span.id for span in agents}

    def above(span_id: str | None) -> list[Hashable]:
        return agents_above(span_id, parent.get, agent_ids.__contains__, len(parent))

    lines = {span.id: above(span.id) for span in agents}
    starts = deque(sorted((a for a in agents if a.start_time is not None), key=_started))
    calls = sorted((span for span in trace.spans if span.tool_call is not None), key=_started)
    lanes, found, running = Lanes(), {}, dict[str, Span]()
    for span in calls:  # in the order they started, as the live guard saw them
        at = span.start_time
        if at is None:  # when it ran is unknown: beside no agent known
            found[id(span.tool_call)] = lanes.lane(above(span.parent_id), [])
            continue
        while starts and _started(starts[0]) <= at:
            agent = starts.popleft()
            running[agent.id] = agent
        for ended in [
            a.id for a in running.values() if a.end_time is not None and a.end_time <= at
        ]:
            del running[ended]
        found[id(span.tool_call)] = lanes.lane(
            above(span.parent_id), [lines[agent_id] for agent_id in running]
        )
    return found


def call_branches(trace: Trace) -> dict[int, Branches]:
    """The graph steps each tool call of a finished run was made in (:data:`Branches`, as
    the live guard read them), by the ``id`` of each span's call; empty when no task span
    says its step."""
    if not any(GRAPH_STEP in span.attributes for span in trace.spans):
        return {}
    by_id = {span.id: span for span in trace.spans}

    def parent_of(key: Hashable) -> Hashable | None:
        span = by_id.get(str(key))
        return span.parent_id if span is not None else None

    def step_of(key: Hashable) -> Any:
        span = by_id.get(str(key))
        return span.attributes.get(GRAPH_STEP) if span is not None else None

    thinking = _tasks_that_called_a_model(trace)
    return {
        id(span.tool_call): steps_above(
            span.id,
            parent_of,
            step_of,
            len(by_id),
            thinking.__contains__ if span.tool_call.id else None,
        )
        for span in trace.spans
        if span.tool_call is not None
    }


def _tasks_that_called_a_model(trace: Trace) -> set[str]:
    """The ids of a graph's tasks (:data:`GRAPH_STEP`) that called a model of the run's own
    (not one a tool called inside its span): each such task runs an agent's steps, as an
    agent span does, though no name made it one (a sub-agent a node runs, a node that asks
    a model itself)."""
    if not any(GRAPH_STEP in span.attributes for span in trace.spans):
        return set()
    by_id = {span.id: span for span in trace.spans}
    found: set[str] = set()
    for span in trace.spans_of(SpanKind.LLM):
        tasks, above, in_tool = [], by_id.get(span.parent_id or ""), False
        for _ in range(len(by_id)):  # parents that name each other, in a broken file, end
            if above is None or (in_tool := above.kind is SpanKind.TOOL):
                break
            if GRAPH_STEP in above.attributes:
                tasks.append(above.id)
            above = by_id.get(above.parent_id or "")
        if not in_tool:
            found.update(tasks)
    return found


def _started(span: Span) -> float:
    return span.start_time if span.start_time is not None else float("-inf")


@register_metric
class ToolCallLoops(Metric):
    """Whether a run stayed out of loops: the live guard's patterns over its tool calls.

    The run's tool calls (those the guard refused included: the agent asked for them) are
    replayed through a :class:`LoopGuard` with the same thresholds as the live alert: the
    same tool with the same arguments ``repeat_threshold`` times since the run last found
    something new, or a short cycle repeated with nothing new found among its calls. The
    calls are read as the live guard read them: those of agents that ran at once apart,
    each agent's in a lane of its own, and a call the tasks of one graph step made side by
    side as many times as the task that made it most.
    1.0 when there is no loop, 0.0 when there is one; ``metadata["loops"]`` names each loop
    and the calls involved. A run with no calls that did not complete (failed, or paused for
    a human) is skipped. Its score feeds the session metrics' loop signal.
    """

    name = "tool_call_loops"
    version: ClassVar[str] = "6"
    """2: the calls of agents running at once read apart; 3: a call that returned something
    new starts its count again; 4: the tasks of one graph step read as side by side (a call
    each made counts once; one that calls a model has a lane, as an agent does); 5: any call
    that returned something new starts every call's count again, and a cycle with news
    among its calls is none; 6: a result whose only changes are times to the second, Unix
    times, objects' addresses, UUIDs and long identifiers is nothing new, nor is what a
    framework answered for a call no tool ran for; a LlamaIndex handoff is one to its
    agent, whatever its reason."""
    reads_steps: ClassVar[bool] = True
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC

    def __init__(
        self,
        *,
        repeat_threshold: int = 3,
        cycle_repeats: int = 2,
        max_cycle_length: int = 3,
        threshold: float | None = None,
    ) -> None:
        super().__init__(threshold=threshold)
        LoopGuard(  # checks the options now, with the guard's own message
            repeat_threshold=repeat_threshold,
            cycle_repeats=cycle_repeats,
            max_cycle_length=max_cycle_length,
        )
        self.options = {
            "repeat_threshold": repeat_threshold,
            "cycle_repeats": cycle_repeats,
            "max_cycle_length": max_cycle_length,
        }

    @classmethod
    def like(cls, guard: LoopGuard) -> ToolCallLoops:
        """The metric that finds the loops ``guard`` finds: its thresholds and patterns."""
        return cls(
            repeat_threshold=guard.repeat_threshold,
            cycle_repeats=guard.cycle_repeats,
            max_cycle_length=guard.max_cycle_length,
        )

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        if case.trace is None:
            return no_trace_to_check()
        calls = case.trace.tool_calls()
        if not calls and not case.trace.completed:  # failed, or paused: no vacuous pass
            return no_calls_to_score(case.trace)
        loops: list[LoopAlert] = []
        # every loop the guard knows repeats a call, so a tool name; most runs repeat neither,
        # and are done here (before any call's arguments are written out as JSON)
        if len({call.name for call in calls}) < len(calls) and len(
            {canonical_call(call) for call in calls}
        ) < len(calls):
            guard = LoopGuard(**self.options)
            lanes, branches = call_lanes(case.trace), call_branches(case.trace)
            # what the framework answered for a call no tool ran for (CrewAI's "I tried
            # reusing the same input", a middleware's refusal) tells the agent nothing new
            # of the world: read as a result not known, as the live guard reads it
            unrun = {
                id(span.tool_call)
                for span in case.trace.spans
                if span.tool_call is not None and span.attributes.get(TOOL_NOT_RUN)
            }
            for call in calls:  # each call once already: the agent asked for each of them
                guard.model_called("run")
                alert = guard.observe(
                    "run",
                    call.model_copy(update={"result": None, "error": None})
                    if id(call) in unrun
                    else call,
                    lane=lanes.get(id(call)),
                    branches=branches.get(id(call), ()),
                )
                if alert is not None:
                    loops.append(alert)
        if not loops:
            return Score(
                1.0,
                f"no repeated calls or cycles among {len(calls)} tool calls",
                {"tool_calls": len(calls)},
            )
        return Score(
            0.0,
            "; ".join(alert.message for alert in loops),
            {
                "tool_calls": len(calls),
                "loops": [
                    {
                        "pattern": alert.pattern,
                        "count": alert.count,
                        "message": alert.message,
                        "calls": [{"name": c.name, "arguments": c.arguments} for c in alert.calls],
                    }
                    for alert in loops
                ],
            },
        )
