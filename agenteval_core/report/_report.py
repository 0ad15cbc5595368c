"""A self-contained HTML report of a run's results (no network, no scripts at view time)."""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import pydantic_core
from pydantic import ValidationError

from .._errors import CaptureError, describe_validation
from .._redact import Redactor
from ..calibration._calibrate import CalibrationReport
from ..engine._summary import ResultSummary
from ..schema._capture import (
    MAX_LINE_BYTES,
    read_capture,
    refuse_compressed,
    rest_of_line_being_written,
    skipping_bad_lines,
)
from ..schema._results import (
    LowestKept,
    MetricResult,
    ResultsLine,
    failing,
    flagged_traces,
    lowest_score,
)
from ..schema._trace import Trace, text_of

__all__ = ["ReportData", "SessionMember", "load_results", "render_html", "write_report"]

logger = logging.getLogger("agenteval")

MAX_SESSIONS = 100
"""Sessions the report shows: all of them up to this many, else this many with the lowest
scores."""
MAX_TRACES = 500
"""Traces the report lists: those that failed a metric or did not complete first."""
MAX_CELLS = 1000
"""Traces drawn as squares on a session's timeline (its chart covers all of them)."""
MAX_CHART_POINTS = 400
"""Points a session chart's line is drawn through, evenly spaced over the session."""


@dataclass
class SessionMember:
    """One trace of a session the report shows, as its timeline draws it."""

    trace_id: str
    loop: bool
    """Its ``loop_detection`` failed."""
    scores: dict[str, float | None]
    """The session's scores as they stood after it."""


@dataclass
class ReportData:
    """What a report shows of a replay ``--json`` file or an online ``results_path`` file,
    read in one pass (two with sessions): the aggregates of every result, and the results
    of the traces and sessions it lists, so memory stays flat however large the file."""

    source: str
    traces: dict[str, tuple[str | None, list[MetricResult]]] = field(default_factory=dict)
    """The traces the report lists (session and results), in file order: up to
    ``MAX_TRACES``, those that failed a metric or did not complete first."""
    sessions: dict[str, list[MetricResult]] = field(default_factory=dict)
    """The closed sessions the report shows: every one, in file order, when there are at
    most ``MAX_SESSIONS``; else the ``MAX_SESSIONS`` with the lowest scores (a session's
    lowest score ranks it; of equal ones, the first in the file), lowest first."""
    open_sessions: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """Sessions the file has traces of but no closing line (the evaluator is still running,
    or stopped without closing them): each with its scores so far, as its last trace's line
    has them. Shown after the closed sessions, up to ``MAX_SESSIONS`` in all."""
    open_session_count: int = 0
    members: dict[str, list[SessionMember]] = field(default_factory=dict)
    """Each shown session's traces, in order."""
    captured: dict[str, Trace] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    """How each listed trace's run ended (``ok``, ``error``, ``stopped``, ...), where known."""
    trace_count: int = 0
    session_count: int = 0
    repeated_traces: int = 0
    """Results lines of a trace already read: left out, each trace counts once."""
    repeated_sessions: int = 0
    """Closing lines of a session already closed with no trace of it read since (results
    appended twice): left out, each session counts once. A session that closed and then
    had more traces (ended by ``end_session``, idle, or cut by the open-sessions limit) is
    a part of its own, shown as ``ID · part N``."""
    summary: ResultSummary = field(default_factory=ResultSummary)
    """Every trace's results, aggregated per metric."""
    session_summary: ResultSummary = field(default_factory=ResultSummary)
    """Every closed session's results, aggregated per metric (open sessions have no results
    yet: see ``open_sessions``)."""
    bins: dict[str, list[int]] = field(default_factory=dict)
    """Per metric, its scores per tenth of [0, 1] (traces and sessions)."""
    calibration: CalibrationReport | None = None
    """How far each judged metric agrees with human labels, when a calibration was given."""
    torn_lines: list[str] = field(default_factory=list)
    """Lines whose writer stopped in the middle of them (a killed process, a full disk), as
    ``file:line``: skipped, so the results they held are missing."""
    unread_capture_lines: list[str] = field(default_factory=list)
    """Lines of the capture that could not be read as traces (a writer killed mid-line, a
    line that is not a trace), as ``file:line``: skipped, as a replay skips them; a scored
    trace they held shows no spans."""

    def _aggregate(self, summary: ResultSummary, results: list[MetricResult]) -> None:
        summary.add(results)
        for result in results:
            if result.score is not None:
                bins = self.bins.setdefault(result.name, [0] * 10)
                bins[min(9, int(result.score * 10))] += 1


def _lines(path: Path, torn: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON object on each line of a results file. A line cut short by its writer (the
    writer's next line starts on a line of its own) is listed in ``torn`` and skipped; any
    other line that is not a JSON object is refused. A last line a writer is still appending
    (a service's live file) is waited for and read whole."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.endswith(b"\n"):  # the last line: its writer may be appending it
                raw += rest_of_line_being_written(handle, MAX_LINE_BYTES)
            if not raw.strip():
                continue
            try:
                line = raw.rstrip(b"\r\n").decode("utf-8")
            except UnicodeDecodeError as exc:
                if exc.reason == "unexpected end of data":  # cut inside a character
                    torn.append(f"{path}:{number}")
                    continue
                raise CaptureError(
                    f"{path}:{number}: not UTF-8 text; pass the --json output of a replay"
                ) from None
            try:
                record = json.loads(line)
            except ValueError as exc:
                if _cut_short(line):
                    torn.append(f"{path}:{number}")
                    continue
                raise CaptureError(f"{path}:{number}: not a JSON line ({exc})") from exc
            if not isinstance(record, dict):
                raise CaptureError(f"{path}:{number}: expected a JSON object per line")
            yield number, record


def _cut_short(line: str) -> bool:
    """Whether ``line`` is JSON that ends before it is complete, as a writer that stopped
    mid-line leaves it (rather than text that is not JSON at all)."""
    try:
        pydantic_core.from_json(line)
    except ValueError as exc:
        return "EOF while parsing" in str(exc)
    return False


class _Parts:
    """Which part of its session a results line belongs to, read in file order: a session
    closes, and a trace of its id read after that (ended by ``end_session``, idle, or past
    the open-sessions limit) opens its next part; a closing line with no trace read since
    the last one is the same results appended twice. Both passes over a file use it, so
    they agree on every part."""

    def __init__(self) -> None:
        self._closed: dict[str, int] = {}  # parts closed so far, by session id
        self._fresh: set[str] = set()  # sessions with a trace read since their last close

    def trace(self, session_id: str) -> str:
        """A trace (read for the first time) of ``session_id``: the part it belongs to."""
        self._fresh.add(session_id)
        return self._key(session_id, self._closed.get(session_id, 0) + 1)

    def close(self, session_id: str) -> str | None:
        """A closing line: the part it closes, or None when it repeats the last close."""
        closed = self._closed.get(session_id, 0)
        if closed and session_id not in self._fresh:
            return None
        self._fresh.discard(session_id)
        self._closed[session_id] = closed + 1
        return self._key(session_id, closed + 1)

    @staticmethod
    def _key(session_id: str, part: int) -> str:
        return session_id if part == 1 else f"{session_id} · part {part}"


_Listed = tuple[int, str, str | None, list[MetricResult], str | None]
"""A trace the report lists: its place in the file (the how-manieth trace read), id,
session, results and status."""


def _first_time(seen: set[str], key: str) -> bool:
    """Whether ``key`` is new to ``seen`` (it is added)."""
    if key in seen:
        return False
    seen.add(key)
    return True


def _results_lines(path: Path, torn: list[str]) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    """The records of a results file, or of every ``*.jsonl`` in a results directory."""
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise CaptureError(
                f"{path}: a directory with no results files (*.jsonl) in it; pass the --json "
                "output of a replay"
            )
    elif path.is_file():
        refuse_compressed(path)
        files = [path]
    else:
        raise CaptureError(f"{path}: no such results file; pass the --json output of a replay")
    for file in files:
        for number, record in _lines(file, torn):
            yield file, number, record


def load_results(
    path: str | os.PathLike[str],
    capture: str | os.PathLike[str] | None = None,
    *,
    redactor: Redactor | None = None,
) -> ReportData:
    """Read per-trace and per-session results, and optionally the captured traces of the
    listed traces (for the drill-down into spans and tool calls), redacted with ``redactor``
    (default: the default rules and those of ``configure_redaction``): pass the one your
    evaluator used, so the report hides what it hid. ``path`` may be a results directory
    (written by a replay given one as its output): its ``*.jsonl`` files are read as one
    results file. Every result is aggregated as it is read; only the listed traces' and
    shown sessions' results are kept (see :class:`ReportData`)."""
    data = ReportData(source=str(path))
    seen: set[str] = set()
    parts = _Parts()
    # listed traces: those that need a look (failed a metric, did not complete) first
    flagged: list[_Listed] = []
    others: list[_Listed] = []
    # sessions with traces and no closing line yet, each with its latest scores: as many as
    # the writer had open at once (an evaluator closes past max_open_sessions)
    still_open: dict[str, dict[str, float | None]] = {}
    shown: LowestKept[str] = LowestKept(MAX_SESSIONS)  # the closed sessions to show
    for line in read_results(path, data.torn_lines):
        if line.trace_id is not None and line.results is not None:
            if not _first_time(seen, line.trace_id):
                data.repeated_traces += 1
                continue
            data.trace_count += 1
            if line.session_id is not None:
                still_open[parts.trace(line.session_id)] = line.session_scores or {}
            data._aggregate(data.summary, line.results)
            kept = flagged if failing(line.results) or line.status not in (None, "ok") else others
            if len(kept) < MAX_TRACES:
                kept.append((len(seen), line.trace_id, line.session_id, line.results, line.status))
        if line.session_results and line.session_id is not None:
            part = parts.close(line.session_id)
            if part is None:
                data.repeated_sessions += 1
                continue
            still_open.pop(part, None)
            data.session_count += 1
            data._aggregate(data.session_summary, line.session_results)
            taken, given_up = shown.offer(part, lowest_score(line.session_results))
            if given_up is not None:
                del data.sessions[given_up]
            if taken:
                data.sessions[part] = line.session_results
    if data.session_count > MAX_SESSIONS:  # the sessions that need a look, first
        data.sessions = {part: data.sessions[part] for part in shown.lowest_first()}
    results_read(path, bool(data.trace_count or data.session_count), data.torn_lines)
    del seen, parts  # every id of the file: freed before the capture is read
    data.open_session_count = len(still_open)
    room = max(0, MAX_SESSIONS - len(data.sessions))
    data.open_sessions = dict(itertools.islice(still_open.items(), room))
    del still_open
    listed = flagged + others[: max(0, MAX_TRACES - len(flagged))]
    if data.sessions or data.open_sessions:
        # the traces the shown sessions' metrics flagged are listed too, to be looked at
        have = {trace_id for _, trace_id, *_ in listed}
        flagged_there = {
            trace_id
            for results in data.sessions.values()
            for trace_id in flagged_traces(results)
            if trace_id not in have
        }
        data.members, found = _members(
            Path(path),
            set(data.sessions) | set(data.open_sessions),
            set(itertools.islice(sorted(flagged_there), MAX_TRACES)),
        )
        listed += found
    for _, trace_id, session_id, results, status in sorted(listed, key=lambda item: item[0]):
        data.traces[trace_id] = (session_id, results)
        if status is not None:
            data.statuses[trace_id] = status
    if capture is not None:
        wanted = set(data.traces)
        # a capture from elsewhere may hold secrets; a report never shows them
        redact = (redactor or Redactor()).trace
        with skipping_bad_lines() as unread:
            data.captured = {
                t.id: redact(t)
                for t in read_capture(capture, on_error=unread.append)
                if t.id in wanted
            }
        data.unread_capture_lines = [f"{error.path}:{error.line}" for error in unread]
        for trace_id, trace in data.captured.items():
            if trace.status is not None:
                data.statuses.setdefault(trace_id, str(trace.status))
        if wanted and not data.captured:
            raise CaptureError(
                f"{capture}: holds none of the {len(wanted)} traces listed from {path}; "
                "pass the capture those results came from"
            )
    return data


def read_results(path: str | os.PathLike[str], torn: list[str]) -> Iterator[ResultsLine]:
    """Every line of a results file, or of a results directory's ``*.jsonl`` files, as it
    streams; a line its writer cut short is listed in ``torn`` and skipped, any other line
    that is not a results line is refused (:class:`CaptureError`, naming file and line).
    Call :func:`results_read` after the last line."""
    for source, number, record in _results_lines(Path(path), torn):
        if "spans" in record or "schema_version" in record:
            raise CaptureError(
                f"{source}:{number}: this is a capture (traces), not results; score it "
                f"first, or give it to `agenteval report {path}` alone, which scores it"
            )
        try:
            yield ResultsLine.model_validate(record)
        except ValidationError as exc:
            raise CaptureError(
                f"{source}:{number}: not a results line: {describe_validation(exc)}"
            ) from None


def results_read(path: str | os.PathLike[str], found: bool, torn: list[str]) -> None:
    """After :func:`read_results`: refuse a file that held no results (``found``), and say
    which lines were cut short."""
    if not found:
        raise CaptureError(
            f"{path}: no results in the file; pass the --json output of `agenteval replay` "
            "or an online evaluator's results_path"
        )
    if torn:
        shown = ", ".join(torn[:3]) + (", ..." if len(torn) > 3 else "")
        logger.warning(
            "agenteval: %d results line(s) were cut short by their writer (a killed process or "
            "a full disk) and skipped: %s; the results they held are missing",
            len(torn),
            shown,
        )


def _members(
    path: Path, sessions: set[str], wanted: set[str]
) -> tuple[dict[str, list[SessionMember]], list[_Listed]]:
    """The traces of the shown sessions, in order, and the traces ``wanted`` as the report
    lists them: a second pass over the file (which sessions are shown is known only once
    their closing lines are read), taking from each line only what a timeline draws. Each
    trace counts once, and has the place in the file it has in the first pass."""
    members: dict[str, list[SessionMember]] = {session: [] for session in sessions}
    found: list[_Listed] = []
    seen: set[str] = set()
    parts = _Parts()
    for _, _, record in _results_lines(path, []):
        session, trace_id, results = (
            record.get("session_id"),
            record.get("trace_id"),
            record.get("results"),
        )
        if not isinstance(session, str):
            continue
        if trace_id is not None and results is not None:  # as load_results reads a line
            if not _first_time(seen, trace_id):
                continue
            part = parts.trace(session)
            if trace_id in wanted:
                line = ResultsLine.model_validate(record)
                found.append((len(seen), trace_id, session, line.results or [], line.status))
            if part in members:
                loop = any(
                    r.get("name") == "loop_detection" and r.get("success") is False for r in results
                )
                members[part].append(
                    SessionMember(trace_id, loop, dict(record.get("session_scores") or {}))
                )
        if record.get("session_results"):
            parts.close(session)
    return members, found


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _histogram(bins: list[int]) -> dict[str, Any]:
    """Scores per tenth of [0, 1], as the template draws them."""
    peak = max(bins) or 1
    bars = [
        {
            "x": 24 + i * 20,
            "y": 64 - 52 * n / peak,
            "height": 52 * n / peak,
            "low": i / 10,
            "high": (i + 1) / 10,
            "count": n,
        }
        for i, n in enumerate(bins)
    ]
    return {"bars": bars, "peak": peak}


def _session_chart(points: dict[str, list[float | None]]) -> dict[str, Any] | None:
    """Each session metric after each trace of the session: one line per metric."""
    if not points or max(len(v) for v in points.values()) < 1:
        return None
    count = max(len(v) for v in points.values())
    width, height, left, top = 300.0, 90.0, 30.0, 8.0

    def x(index: int) -> float:
        return left + (width - left - 8) * (index / max(1, count - 1))

    def y(score: float) -> float:
        return top + (height - top - 22) * (1 - score)

    colours = ["#4a7fd4", "#d46a4a", "#3a9a5b", "#8a5ad4"]
    step = -(-count // MAX_CHART_POINTS)  # a long session's line through evenly spaced points
    lines = [
        {
            "name": name,
            "colour": colours[n % len(colours)],
            "points": " ".join(
                f"{x(i):.1f},{y(v):.1f}"
                for i, v in enumerate(values)
                if v is not None and (i % step == 0 or i == len(values) - 1)
            ),
        }
        for n, (name, values) in enumerate(points.items())
    ]
    return {
        "width": width,
        "height": height,
        "left": left,
        "y0": y(0),
        "y1": y(1),
        "count": count,
        "lines": lines,
    }


def _readable(value: object, limit: int = 400) -> str:
    """A span's input or output as a person would read it: chat messages as "role: text"
    lines, anything else as text."""
    messages = value.get("messages") if isinstance(value, dict) else value
    if (
        isinstance(messages, list)
        and messages
        and all(isinstance(m, dict) and "content" in m for m in messages)
    ):
        text = "\n".join(
            f"{m.get('role') or m.get('type') or 'message'}: {text_of(m.get('content'))}"
            for m in messages
        )
    else:
        text = text_of(value)
    return text if len(text) <= limit else f"{text[:limit]}…"


def _duration(start: float | None, end: float | None) -> str:
    if start is None or end is None:
        return ""
    seconds = max(0.0, end - start)
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


UNKNOWN_RISK = "#a7adba"
"""A square's colour when its risk is not known yet (an open session)."""


def _risk_colour(risk: float) -> str:
    risk = min(1.0, max(0.0, risk))
    return f"hsl({120 * (1 - risk):.0f}, 65%, 45%)"


def _timeline(trace: Trace) -> list[dict[str, Any]]:
    """Spans as rows of a timeline: nesting, kind, name, a bar placed by start and end within
    the trace, the duration, what went in or came out, and any error."""
    starts = [s.start_time for s in trace.spans if s.start_time is not None]
    ends = [s.end_time for s in trace.spans if s.end_time is not None]
    origin = trace.start_time if trace.start_time is not None else min(starts, default=None)
    finish = trace.end_time if trace.end_time is not None else max(ends, default=None)
    total = (finish - origin) if origin is not None and finish is not None else 0.0
    depth: dict[str, int] = {}
    rows = []
    for span in trace.spans:
        level = depth[span.id] = depth.get(span.parent_id or "", -1) + 1
        if span.tool_call is not None:
            call = span.tool_call
            outcome = f"error: {call.error}" if call.error else f"→ {_readable(call.result, 200)}"
            detail = f"{call.name}({text_of(call.arguments)[:200]}) {outcome}"
        else:
            detail = _readable(span.output if span.output is not None else span.input, 300)
        bar = None
        if total > 0 and origin is not None and span.start_time is not None:
            left = 100 * (span.start_time - origin) / total
            width = 100 * ((span.end_time or span.start_time) - span.start_time) / total
            bar = {"left": min(99.5, left), "width": max(0.5, width)}
        rows.append(
            {
                "indent": level * 1.2 + 0.3,
                "kind": span.kind.value,
                "name": span.name,
                "bar": bar,
                "took": _duration(span.start_time, span.end_time),
                "detail": detail,
                "error": span.error,
            }
        )
    return rows


def _session_risks(results: list[MetricResult]) -> tuple[dict[str, float], set[str]]:
    reliability = next((r for r in results if r.name == "agent_reliability"), None)
    if reliability is None:
        return {}, set()
    # written by agenteval, but the file may come from elsewhere: a value of the wrong type
    # leaves the session's timeline without it rather than failing the report
    per_trace = reliability.metadata.get("per_trace_signals")
    risks = {
        str(tid): float(signals["step_risk"])
        for tid, signals in (per_trace.items() if isinstance(per_trace, dict) else ())
        if isinstance(signals, dict) and _is_number(signals.get("step_risk"))
    }
    return risks, set(flagged_traces([reliability]))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def render_html(data: ReportData) -> str:
    """The report as one HTML document (a template with autoescaping: a trace's text is
    always escaped)."""
    metrics = list(data.summary.metrics.values()) + list(data.session_summary.metrics.values())
    loops = {
        tid
        for tid, (_, results) in data.traces.items()
        for r in results
        if r.name == "loop_detection" and r.success is False
    }
    sessions = []
    shown: list[tuple[str, list[MetricResult] | None]] = [*data.sessions.items()]
    shown += [(session_id, None) for session_id in data.open_sessions]
    for session_id, results in shown:  # None: open, no results yet
        risks, flagged = _session_risks(results or [])
        members = data.members.get(session_id, [])
        over_time: dict[str, list[float | None]] = {}
        for member in members:
            for name, value in member.scores.items():
                over_time.setdefault(name, []).append(value)
        cells = [
            {
                "id": member.trace_id,
                "listed": member.trace_id in data.traces,
                "flagged": member.trace_id in flagged,
                "loop": member.loop,
                # an open session's per-trace risks come with its closing results
                "colour": UNKNOWN_RISK
                if results is None
                else _risk_colour(risks.get(member.trace_id, 0.0)),
                "risk": risks.get(member.trace_id),
            }
            for member in members[:MAX_CELLS]
        ]
        scores = (
            [
                {"name": name, "score": score}
                for name, score in data.open_sessions[session_id].items()
            ]
            if results is None
            else results
        )
        sessions.append(
            {
                "id": session_id,
                "open": results is None,
                "cells": cells,
                "more": max(0, len(members) - MAX_CELLS),
                "results": scores,
                "chart": _session_chart(over_time),
            }
        )
    traces = []
    for index, (tid, (trace_session, results)) in enumerate(data.traces.items()):
        trace = data.captured.get(tid)
        status = data.statuses.get(tid)
        traces.append(
            {
                "id": tid,
                "open": index == 0 or status not in (None, "ok"),
                "status": status,
                "session": trace_session,
                "results": results,
                "failing": [r.name for r in failing(results)],
                "trace": trace,
                "request": text_of(trace.input).strip()[:120] if trace is not None else "",
                "input_text": _readable(trace.input, 500) if trace is not None else "",
                "output_text": _readable(trace.output, 500) if trace is not None else "",
                "took": _duration(trace.start_time, trace.end_time) if trace is not None else "",
                "tokens": sum((r.input_tokens or 0) + (r.output_tokens or 0) for r in results),
                "cost": sum(r.cost_usd or 0.0 for r in results),
                "loop": tid in loops,
                "timeline": _timeline(trace) if trace is not None and trace.spans else None,
            }
        )
    calibration = data.calibration
    calibration_items = (
        [
            (item, list(next(iter(item.confusion.values()), {})))
            for item in calibration.metrics.values()
        ]
        if calibration is not None
        else []
    )
    page = _template().render(
        source=data.source,
        torn_lines=data.torn_lines,
        unread_capture_lines=data.unread_capture_lines,
        trace_count=data.trace_count,
        session_count=data.session_count,
        open_session_count=data.open_session_count,
        listed_traces=len(data.traces),
        shown_sessions=len(data.sessions),
        shown_open_sessions=len(data.open_sessions),
        repeated_traces=data.repeated_traces,
        repeated_sessions=data.repeated_sessions,
        metrics=metrics,
        histograms={m.name: _histogram(data.bins.get(m.name, [0] * 10)) for m in metrics},
        calibration_items=calibration_items,
        calibrated=calibration.metrics if calibration is not None else {},
        sessions=sessions,
        traces=traces,
    )
    return page.lstrip()  # the template's macros come before the document


@functools.cache
def _template() -> jinja2.Template:
    # autoescaping for every value, and StrictUndefined so a misspelt name fails loudly
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("agenteval_core.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    environment.filters["fmt"] = _fmt
    return environment.get_template("report.html.j2")


def write_report(
    results: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    capture: str | os.PathLike[str] | None = None,
    calibration: CalibrationReport | str | os.PathLike[str] | None = None,
    redactor: Redactor | None = None,
) -> Path:
    """Read ``results`` (and ``capture``, redacted with ``redactor``: see
    :func:`load_results`) and write the HTML report to ``output``; with a ``calibration``
    (a report, or a file ``agenteval calibrate --json`` wrote) it shows how far each judged
    metric agrees with human labels."""
    data = load_results(results, capture, redactor=redactor)
    if calibration is not None and not isinstance(calibration, CalibrationReport):
        calibration = CalibrationReport.load(calibration)
    data.calibration = calibration
    path = Path(output)
    path.write_text(render_html(data), encoding="utf-8")
    return path
