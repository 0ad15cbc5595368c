"""A self-contained HTML report of a run's results (no network, no scripts at view time)."""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .._errors import CaptureError, describe_validation
from .._redact import Redactor
from ..calibration._calibrate import CalibrationReport
from ..engine._summary import ResultSummary
from ..schema._capture import read_capture
from ..schema._results import MetricResult, ResultsLine
from ..schema._trace import Trace, text_of

__all__ = ["ReportData", "load_results", "render_html", "write_report"]

MAX_SESSIONS = 100
MAX_TRACES = 500


@dataclass
class ReportData:
    """Results read from a replay ``--json`` file or an online ``results_path`` file."""

    source: str
    traces: dict[str, tuple[str | None, list[MetricResult]]] = field(default_factory=dict)
    sessions: dict[str, list[MetricResult]] = field(default_factory=dict)
    captured: dict[str, Trace] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    """How each trace's run ended (``ok``, ``error``, ``stopped``, ...), where known."""
    session_scores: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """Per trace, its session's scores as they stood after it (for the charts over time)."""
    calibration: CalibrationReport | None = None
    """How far each judged metric agrees with human labels, when a calibration was given."""


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise CaptureError(f"{path}:{number}: not a JSON line ({exc})") from exc
            if not isinstance(record, dict):
                raise CaptureError(f"{path}:{number}: expected a JSON object per line")
            yield number, record


def load_results(
    path: str | os.PathLike[str],
    capture: str | os.PathLike[str] | None = None,
    *,
    redactor: Redactor | None = None,
) -> ReportData:
    """Read per-trace and per-session results, and optionally the captured traces (for the
    drill-down into spans and tool calls), redacted with ``redactor`` (default: the default
    rules and those of ``configure_redaction``): pass the one your evaluator used, so the
    report hides what it hid."""
    source = Path(path)
    if not source.is_file():
        raise CaptureError(f"{path}: no such results file; pass the --json output of a replay")
    data = ReportData(source=str(path))
    for number, record in _lines(source):
        if "spans" in record or "schema_version" in record:
            raise CaptureError(
                f"{path}:{number}: this is a capture (traces), not results; score it first, "
                f"or give it to `agenteval report {path}` alone, which scores it"
            )
        try:
            line = ResultsLine.model_validate(record)
        except ValidationError as exc:
            raise CaptureError(
                f"{path}:{number}: not a results line: {describe_validation(exc)}"
            ) from None
        if line.trace_id is not None and line.results is not None:
            data.traces[line.trace_id] = (line.session_id, line.results)
            if line.status is not None:
                data.statuses[line.trace_id] = line.status
            if line.session_scores:
                data.session_scores[line.trace_id] = line.session_scores
        if line.session_results and line.session_id is not None:
            data.sessions[line.session_id] = line.session_results
    if not data.traces and not data.sessions:
        raise CaptureError(
            f"{path}: no results in the file; pass the --json output of `agenteval replay` "
            "or an online evaluator's results_path"
        )
    if capture is not None:
        wanted = set(data.traces)
        # a capture from elsewhere may hold secrets; a report never shows them
        redact = (redactor or Redactor()).trace
        data.captured = {t.id: redact(t) for t in read_capture(capture) if t.id in wanted}
        for trace_id, trace in data.captured.items():
            if trace.status is not None:
                data.statuses.setdefault(trace_id, str(trace.status))
        if wanted and not data.captured:
            raise CaptureError(
                f"{capture}: holds none of the {len(wanted)} traces scored in {path}; "
                "pass the capture those results came from"
            )
    return data


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _histogram(scores: list[float]) -> str:
    bins = [0] * 10
    for score in scores:
        bins[min(9, int(score * 10))] += 1
    peak = max(bins) or 1
    bars = "".join(
        f'<rect x="{24 + i * 20}" y="{64 - 52 * n / peak:.1f}" width="18" height="{52 * n / peak:.1f}">'
        f"<title>{i / 10:.1f}–{(i + 1) / 10:.1f}: {n} trace(s)</title></rect>"
        for i, n in enumerate(bins)
    )
    axes = (
        '<text x="22" y="16" text-anchor="end">' + str(peak) + "</text>"
        '<text x="22" y="64" text-anchor="end">0</text>'
        '<text x="24" y="78">0</text><text x="124" y="78" text-anchor="middle">score</text>'
        '<text x="224" y="78" text-anchor="end">1</text>'
    )
    return (
        '<svg class="hist" viewBox="0 0 226 80" role="img" '
        f'aria-label="traces per score bin, scores 0 to 1">{bars}{axes}</svg>'
    )


def _session_chart(points: dict[str, list[float | None]]) -> str:
    """Each session metric after each trace of the session: one line per metric."""
    if not points or max(len(v) for v in points.values()) < 1:
        return ""
    count = max(len(v) for v in points.values())
    width, height, left, top = 300.0, 90.0, 30.0, 8.0

    def x(index: int) -> float:
        return left + (width - left - 8) * (index / max(1, count - 1))

    def y(score: float) -> float:
        return top + (height - top - 22) * (1 - score)

    colours = ["#4a7fd4", "#d46a4a", "#3a9a5b", "#8a5ad4"]
    lines, legend = [], []
    for n, (name, values) in enumerate(points.items()):
        colour = colours[n % len(colours)]
        coords = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values) if v is not None)
        lines.append(
            f'<polyline class="series" data-metric="{html.escape(name)}" points="{coords}" '
            f'fill="none" stroke="{colour}" stroke-width="2"/>'
        )
        legend.append(f'<span style="color:{colour}">■</span> {html.escape(name)}')
    axes = (
        f'<line x1="{left}" y1="{y(0)}" x2="{width - 8}" y2="{y(0)}" stroke="#99a"/>'
        f'<line x1="{left}" y1="{y(1)}" x2="{left}" y2="{y(0)}" stroke="#99a"/>'
        f'<text x="{left - 3}" y="{y(1) + 4}" text-anchor="end">1</text>'
        f'<text x="{left - 3}" y="{y(0) + 4}" text-anchor="end">0</text>'
        f'<text x="{left}" y="{height - 4}">1</text>'
        f'<text x="{(left + width) / 2}" y="{height - 4}" text-anchor="middle">'
        "trace in session</text>"
        f'<text x="{width - 8}" y="{height - 4}" text-anchor="end">{count}</text>'
    )
    return (
        f'<div class="chart"><svg viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
        f'aria-label="session scores after each trace (score 0 to 1)">{axes}{"".join(lines)}'
        f'</svg><div class="legend">{" ".join(legend)} <span class="muted">score after each '
        "trace</span></div></div>"
    )


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


def _risk_colour(risk: float) -> str:
    risk = min(1.0, max(0.0, risk))
    return f"hsl({120 * (1 - risk):.0f}, 65%, 45%)"


def _timeline(trace: Trace) -> str:
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
        bar = ""
        if total > 0 and origin is not None and span.start_time is not None:
            left = 100 * (span.start_time - origin) / total
            width = 100 * ((span.end_time or span.start_time) - span.start_time) / total
            bar = (
                f'<div class="bar {html.escape(span.kind.value)}" '
                f'style="margin-left:{min(99.5, left):.1f}%;width:{max(0.5, width):.1f}%"></div>'
            )
        rows.append(
            f'<tr class="span{" err" if span.error else ""}">'
            f'<td style="padding-left:{level * 1.2 + 0.3}em">{html.escape(span.kind.value)}</td>'
            f"<td>{html.escape(span.name)}</td><td class='lane'>{bar}</td>"
            f'<td class="num">{_duration(span.start_time, span.end_time)}</td>'
            f"<td class='detail'>{html.escape(detail)}</td>"
            f"<td>{html.escape(span.error or '')}</td></tr>"
        )
    return (
        "<h4>Timeline</h4><table class='spans'><tr><th>kind</th><th>name</th><th>when</th>"
        f"<th>took</th><th>in / out</th><th>error</th></tr>{''.join(rows)}</table>"
    )


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
    flagged = reliability.metadata.get("flagged_traces")
    return risks, {str(t) for t in flagged} if isinstance(flagged, list) else set()


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def render_html(data: ReportData) -> str:
    """The report as one HTML document."""
    summary = ResultSummary()
    scores: dict[str, list[float]] = {}
    for _, results in data.traces.values():
        summary.add(results)
        for r in results:
            if r.score is not None:
                scores.setdefault(r.name, []).append(r.score)
    session_summary = ResultSummary()
    for results in data.sessions.values():
        session_summary.add(results)
        for r in results:
            if r.score is not None:
                scores.setdefault(r.name, []).append(r.score)
    esc = html.escape

    metric_rows = "".join(
        f'<tr data-metric="{esc(m.name)}"><td>{esc(m.name)}</td>'
        f'<td class="num" data-field="mean">{_fmt(m.mean)}</td>'
        f'<td class="num" data-field="pass_rate">{_fmt(m.pass_rate)}</td>'
        f'<td class="num" data-field="scored">{m.scored}</td>'
        f'<td class="num" data-field="errors">{m.errors}</td>'
        f'<td class="num" data-field="skipped">{m.skipped}</td>'
        f'<td class="num">{m.input_tokens + m.output_tokens}</td>'
        f'<td class="num">{_fmt(m.cost_usd, 4) if m.input_tokens else "–"}</td>'
        f"<td>{_histogram(scores.get(m.name, []))}</td></tr>"
        for m in list(summary.metrics.values()) + list(session_summary.metrics.values())
    )

    loops = {
        tid
        for tid, (_, results) in data.traces.items()
        for r in results
        if r.name == "loop_detection" and r.success is False
    }
    session_blocks = []
    for session_id, results in list(data.sessions.items())[:MAX_SESSIONS]:
        risks, flagged = _session_risks(results)
        members = [tid for tid, (sid, _) in data.traces.items() if sid == session_id]
        cells = "".join(
            f'<a href="#t-{esc(tid)}" class="cell{" flagged" if tid in flagged else ""}'
            f'{" loop" if tid in loops else ""}" style="background:{_risk_colour(risks.get(tid, 0.0))}" '
            f'title="{esc(tid)} risk {_fmt(risks.get(tid))}">{"⟲" if tid in loops else ""}</a>'
            for tid in members
        )
        scores_text = " · ".join(f"{esc(r.name)} {_fmt(r.score)}" for r in results)
        over_time: dict[str, list[float | None]] = {}
        for tid in members:
            for name, value in data.session_scores.get(tid, {}).items():
                over_time.setdefault(name, []).append(value)
        session_blocks.append(
            f'<div class="session" data-session="{esc(session_id)}"><div class="sid">{esc(session_id)}'
            f'</div><div class="timeline">{cells}</div><div class="sscores">{scores_text}</div>'
            f"<div class='sscores'>{_session_chart(over_time)}</div></div>"
        )

    trace_blocks = []
    for index, (tid, (trace_session, results)) in enumerate(list(data.traces.items())[:MAX_TRACES]):
        rows = "".join(
            f'<tr class="{r.status}{"" if r.success is not False else " fail"}"><td>{esc(r.name)}</td>'
            f'<td class="num">{_fmt(r.score)}</td><td class="num">{r.threshold:g}</td>'
            f"<td>{esc(r.error or r.reason)}</td></tr>"
            for r in results
        )
        trace = data.captured.get(tid)
        status = data.statuses.get(tid)
        request = text_of(trace.input).strip()[:120] if trace is not None else ""
        tokens = sum((r.input_tokens or 0) + (r.output_tokens or 0) for r in results)
        cost = sum(r.cost_usd or 0.0 for r in results)
        took = _duration(trace.start_time, trace.end_time) if trace is not None else ""
        header = (
            (f'<span class="status {esc(status)}">{esc(status)}</span> ' if status else "")
            + (
                f"<b>{esc(request)}</b> <span class='muted'>{esc(tid)}</span>"
                if request
                else f"<b>{esc(tid)}</b>"
            )
            + f" <span class='muted'>{esc(trace_session or 'no session')}</span>"
            + (f" <span class='muted took'>{took}</span>" if took else "")
            + (
                f" <span class='muted judge'>judge {tokens:,} tokens, ${cost:.4f}</span>"
                if tokens
                else ""
            )
            + (" <span class='badge'>loop</span>" if tid in loops else "")
            + (
                f" <span class='badge'>{len(trace.alerts)} alert(s)</span>"
                if trace is not None and trace.alerts
                else ""
            )
        )
        body = ""
        if trace is not None:
            body += (
                f"<p><b>Request</b> {esc(_readable(trace.input, 500))}<br><b>Answer</b> "
                f"{esc(_readable(trace.output, 500)) or '<i>none</i>'}"
                + (f"<br><b>Ended</b> {esc(trace.status_reason)}" if trace.status_reason else "")
                + (f"<br><b>Error</b> {esc(trace.error)}" if trace.error else "")
                + "</p>"
            )
            if trace.alerts:
                body += (
                    "<ul class='alerts'>"
                    + "".join(
                        f"<li>loop alert ({esc(alert.pattern)}): {esc(alert.message)}"
                        + (" (the guard stopped the run)" if alert.stopped else "")
                        + "</li>"
                        for alert in trace.alerts
                    )
                    + "</ul>"
                )
        body += (
            "<table><tr><th>metric</th><th>score</th><th>threshold</th><th>reason</th></tr>"
            f"{rows}</table>"
        )
        if trace is not None and trace.spans:
            body += _timeline(trace)
        trace_blocks.append(
            f'<details id="t-{esc(tid)}"{" open" if index == 0 or status not in (None, "ok") else ""}>'
            f"<summary>{header}</summary>"
            f"{body}</details>"
        )

    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agenteval report</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #1d2430; }}
h1 {{ font-size: 1.5em; }} h2 {{ margin-top: 1.8em; border-bottom: 1px solid #dde; }}
table {{ border-collapse: collapse; width: 100%; margin: .5em 0; }}
th, td {{ border-bottom: 1px solid #eef; padding: .25em .5em; text-align: left; vertical-align: top;
          overflow-wrap: anywhere; }}
summary, li, p, pre {{ overflow-wrap: anywhere; }} pre {{ white-space: pre-wrap; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
.hist {{ width: 170px; height: 60px; }} .hist rect {{ fill: #4a7fd4; }}
svg text {{ font-size: 9px; fill: #556; }}
.chart svg {{ width: 320px; height: 96px; }} .legend {{ font-size: .85em; }}
.lane {{ width: 22%; min-width: 120px; }} .bar {{ height: 10px; border-radius: 2px; background: #8a9; }}
.bar.llm {{ background: #4a7fd4; }} .bar.tool {{ background: #d4a24a; }} .bar.agent {{ background: #7a6ad4; }}
td.detail {{ white-space: pre-wrap; font-size: .9em; }} ul.alerts {{ color: #b3261e; }}
.session {{ display: grid; grid-template-columns: 14em 1fr; gap: .3em 1em; margin: .6em 0; }}
.sscores {{ grid-column: 2; color: #556; font-size: .9em; }}
.timeline {{ display: flex; flex-wrap: wrap; gap: 3px; }}
.cell {{ width: 18px; height: 18px; border-radius: 3px; color: #fff; font-size: 12px;
        text-align: center; line-height: 18px; text-decoration: none; }}
.cell.flagged {{ outline: 2px solid #c00; outline-offset: 1px; }}
details {{ border: 1px solid #e4e6ee; border-radius: 6px; margin: .4em 0; padding: .3em .7em; }}
summary {{ cursor: pointer; }} .muted {{ color: #778; }}
.badge {{ background: #c00; color: #fff; border-radius: 3px; padding: 0 .4em; font-size: .8em; }}
.status {{ color: #fff; border-radius: 3px; padding: 0 .4em; font-size: .8em; background: #b3261e; }}
.status.ok {{ background: #2e7d32; }} .status.interrupted {{ background: #b26a00; }}
tr.error td, tr.fail td {{ background: #fff2f2; }} tr.skipped td {{ color: #889; }}
tr.err td {{ background: #fff2f2; }}
</style></head><body>
<h1>agenteval report</h1>
<p class="muted">{esc(data.source)} · <span id="trace-count">{len(data.traces)}</span> traces ·
<span id="session-count">{len(data.sessions)}</span> sessions</p>
<h2>Metrics</h2>
<table id="metrics"><tr><th>metric</th><th>mean</th><th>pass rate</th><th>scored</th><th>errors</th>
<th>skipped</th><th>judge tokens</th><th>cost (USD)</th><th>distribution</th></tr>{metric_rows}</table>
{_calibration(data.calibration)}
<h2>Sessions</h2>
<p class="muted">One square per trace, coloured by its risk (green low, red high); a red outline marks
a flagged trace, ⟲ a loop. Click a square for the trace.</p>
{"".join(session_blocks) or "<p>No session results.</p>"}
<h2>Traces</h2>
{"".join(trace_blocks)}
</body></html>
"""


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


def _calibration(report: CalibrationReport | None) -> str:
    """The calibration section: figures per metric and its confusion matrix."""
    if report is None:
        return ""
    esc = html.escape
    rows, matrices = [], []
    for item in report.metrics.values():
        rows.append(
            f'<tr data-calibration="{esc(item.metric)}"><td>{esc(item.metric)}'
            f"{' (graded)' if item.graded else ''}</td>"
            f'<td class="num">{item.labelled}</td><td class="num">{item.scored}</td>'
            f'<td class="num" data-field="agreement">{_fmt(item.agreement)}</td>'
            f'<td class="num" data-field="kappa">{_fmt(item.kappa)}</td>'
            f'<td class="num">{_fmt(item.threshold)}</td>'
            f'<td class="num" data-field="best">{item.best_summary or "–"}</td></tr>'
        )
        columns = list(next(iter(item.confusion.values()), {}))
        if columns:
            head = "".join(f"<th>metric {esc(c)}</th>" for c in columns)
            body = "".join(
                f"<tr><th>label {esc(label)}</th>"
                + "".join(f'<td class="num">{cells.get(c, 0)}</td>' for c in columns)
                + "</tr>"
                for label, cells in item.confusion.items()
            )
            matrices.append(
                f"<details><summary>{esc(item.metric)}: confusion matrix</summary>"
                f"<table><tr><th></th>{head}</tr>{body}</table></details>"
            )
    return (
        '<h2>Judge calibration</h2><p class="muted">Agreement with human labels at each '
        "metric's threshold, Cohen's kappa (quadratic-weighted for graded labels), and the "
        "threshold that agrees with the most labels.</p>"
        '<table id="calibration"><tr><th>metric</th><th>labels</th><th>scored</th>'
        "<th>agreement</th><th>kappa</th><th>threshold</th><th>best threshold (agreement)</th>"
        f"</tr>{''.join(rows)}</table>{''.join(matrices)}"
    )
