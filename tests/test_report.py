"""The HTML report: right numbers from a results file, and a real page in headless Chromium."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest
from browser import CHROMIUM, chromium
from judge_server import JudgeServer, Reply

from agenteval_core import (
    AgentStep,
    LoopAlert,
    MetricResult,
    RunStatus,
    Span,
    SpanKind,
    ToolCall,
    Trace,
    read_capture,
    replay,
)
from agenteval_core.judges import OpenAIJudge
from agenteval_core.report._report import ReportData, load_results, render_html, write_report

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "captures" / "support_agent.jsonl"
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    out = tmp_path / "results.jsonl"
    replay(EXAMPLE, output=out)
    return out


def cell(page: str, metric: str, field: str) -> str:
    match = re.search(rf'data-metric="{metric}".*?data-field="{field}">([^<]*)<', page, re.DOTALL)
    assert match, f"no {field} for {metric}"
    return match.group(1)


def test_report_numbers_match_the_results_file(results: Path) -> None:
    data = load_results(results, EXAMPLE)
    page = render_html(data)
    # every number in the table is recomputed here from the results file
    for metric in ("parameter_correctness", "coherence", "loop_detection"):
        scores = [
            r.score
            for _, rs in data.traces.values()
            for r in rs
            if r.name == metric and r.score is not None
        ]
        passed = [r for _, rs in data.traces.values() for r in rs if r.name == metric and r.success]
        assert cell(page, metric, "mean") == f"{sum(scores) / len(scores):.3f}"
        assert cell(page, metric, "pass_rate") == f"{len(passed) / len(scores):.3f}"
        assert cell(page, metric, "scored") == str(len(scores))
    assert '<span id="trace-count">9</span>' in page and '<span id="session-count">3</span>' in page
    # the looping session: its repeats are marked, and its traces' spans are in the drill-down
    assert page.count("<span class='badge'>loop</span>") == 2
    assert page.count("<h4>Timeline</h4>") == 9 and "lookup_order" in page
    assert (
        "<script" not in page and "http://" not in page and "https://" not in page
    )  # self-contained


def test_report_command_and_bad_input(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agenteval_core.cli",
            "report",
            str(results),
            "--capture",
            str(EXAMPLE),
            "--html",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and out.read_text().startswith("<!doctype html>")
    missing = subprocess.run(
        [sys.executable, "-m", "agenteval_core.cli", "report", str(tmp_path / "nope.jsonl")],
        capture_output=True,
        text=True,
    )
    assert (
        missing.returncode == 2
        and "no such results file" in missing.stderr
        and "Traceback" not in missing.stderr
    )


def report(*arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agenteval_core.cli", "report", *map(str, arguments)],
        capture_output=True,
        text=True,
    )


def test_report_refuses_empty_or_mismatched_input_in_one_line(
    results: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    done = report(empty, "--html", tmp_path / "r.html")
    assert done.returncode == 2 and done.stderr.strip() == (
        f"agenteval: error: {empty}: no results in the file; pass the --json output of "
        "`agenteval replay` or an online evaluator's results_path"
    )
    other = tmp_path / "other.jsonl"
    other.write_text(EXAMPLE.read_text().splitlines()[0].replace('"id":"', '"id":"x', 1) + "\n")
    done = report(results, "--capture", other, "--html", tmp_path / "r.html")
    assert done.returncode == 2 and "holds none of the" in done.stderr
    assert "pass the capture those results came from" in done.stderr
    assert not (tmp_path / "r.html").exists()
    # a capture passed as --capture's partner the wrong way round is named for what it is
    swapped = report(results, "--capture", results, "--html", tmp_path / "r.html")
    assert swapped.returncode == 2 and "Traceback" not in swapped.stderr


_RESULT = {"name": "m", "version": "1", "threshold": 0.5, "success": True, "score": 0.5}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ([1, 2], "expected a JSON object per line"),
        ("hello", "expected a JSON object per line"),
        (
            {"trace_id": 5, "results": []},
            "not a results line: trace_id: Input should be a valid string",
        ),
        (
            {"trace_id": "t", "results": "oops"},
            "not a results line: results: Input should be a valid list",
        ),
        (
            {"trace_id": "t", "results": [1]},
            "not a results line: results.0: Input should be a valid dictionary or instance of MetricResult",
        ),
        (
            {"trace_id": "t", "results": [{"name": "m"}]},
            "not a results line: results.0.version: Field required",
        ),
        (
            {"trace_id": "t", "results": [_RESULT | {"score": True}]},
            "not a results line: results.0.score: a score is a number or null, not bool",
        ),
        (
            {"trace_id": "t", "results": [_RESULT | {"score": "0.9"}]},
            "not a results line: results.0.score: a score is a number or null, not str",
        ),
        (
            {"trace_id": "t", "results": [_RESULT | {"metadata": [1]}]},
            "not a results line: results.0.metadata: Input should be a valid dictionary",
        ),
        (
            {"session_id": ["s"], "session_results": [_RESULT]},
            "not a results line: session_id: Input should be a valid string",
        ),
        (
            {"session_id": "s", "session_results": {"a": 1}},
            "not a results line: session_results: Input should be a valid list",
        ),
    ],
)
def test_report_refuses_malformed_results_in_one_line(
    line: object, message: str, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(line) + "\n")
    done = report(bad, "--html", tmp_path / "r.html")
    assert (done.returncode, done.stderr.strip()) == (2, f"agenteval: error: {bad}:1: {message}")
    assert not (tmp_path / "r.html").exists()


def test_lines_their_writer_cut_short_are_skipped_and_named(
    results: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # what a killed process or a full disk leaves in a results file: a line that stops
    # mid-JSON, and the writer's next line on a line of its own
    lines = results.read_bytes().splitlines(keepends=True)
    whole = load_results(results)
    first, second, third = lines[0], lines[1], lines[2]
    assert b'"reason":"' in first
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(
        first[: first.index(b'"reason":"') + 14]  # cut inside a string
        + b"\n"
        + second
        + third[: third.index(b",") + 1]  # cut after a comma
        + b"\n"
        + '{"trace_id":"caf\u00e9'.encode()[:-1]  # cut inside a two-byte character
        + b"\n"
        + b"".join(lines[3:])
        + lines[0][:40]  # a torn last line, with no newline
    )
    with caplog.at_level("WARNING", logger="agenteval"):
        data = load_results(torn)
    assert data.torn_lines == [f"{torn}:1", f"{torn}:3", f"{torn}:4", f"{torn}:{len(lines) + 2}"]
    # the whole lines are all read: only the first and third traces are missing
    lost = {json.loads(line)["trace_id"] for line in (first, third)}
    assert set(data.traces) == set(whole.traces) - lost
    assert data.sessions == whole.sessions
    assert [r.getMessage() for r in caplog.records] == [
        f"agenteval: 4 results line(s) were cut short by their writer (a killed process or a "
        f"full disk) and skipped: {torn}:1, {torn}:3, {torn}:4, ...; the results they held are "
        "missing"
    ]
    done = report(torn, "--html", tmp_path / "r.html")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert (
        f'id="torn-lines">4 line(s) of the results file were cut short by their writer (a '
        f"killed process or a full disk) and skipped ({torn}:1, {torn}:3, {torn}:4, …): the "
        "results they held are missing from this report.</p>"
    ) in page
    assert 'id="torn-lines"' not in render_html(whole)


@pytest.mark.skipif(sys.platform == "win32", reason="writers lock the file with flock")
def test_a_results_line_being_written_is_read_whole(
    results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report on a service's live results file: the reader meets the last line half
    written while its writer (here this test, holding the file's lock as ResultsFileSink
    does) is still appending it. The reader waits for the line and reads it whole: nothing
    is reported torn, every trace is there."""
    import fcntl
    import threading

    from agenteval_core.report import _report

    lines = results.read_bytes().splitlines(keepends=True)
    live = tmp_path / "live.jsonl"
    live.write_bytes(b"".join(lines[:-1]))
    half = len(lines[-1]) // 2
    reached = threading.Event()
    real = _report.rest_of_line_being_written

    def waiting_reader(handle: IO[bytes], limit: int) -> bytes:
        reached.set()  # the reader holds the half line, without its newline
        return real(handle, limit)

    monkeypatch.setattr(_report, "rest_of_line_being_written", waiting_reader)
    loaded: list[ReportData] = []
    with live.open("ab", buffering=0) as appending:
        fcntl.flock(appending.fileno(), fcntl.LOCK_EX)
        appending.write(lines[-1][:half])
        reader = threading.Thread(target=lambda: loaded.append(load_results(live)))
        reader.start()
        assert reached.wait(10)
        appending.write(lines[-1][half:])
        fcntl.flock(appending.fileno(), fcntl.LOCK_UN)
    reader.join(10)
    [data] = loaded
    whole = load_results(results)
    assert data.torn_lines == []
    assert (data.traces, data.sessions) == (whole.traces, whole.sessions)


def test_a_capture_with_lines_that_are_not_traces_is_reported_as_a_replay_reads_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What a killed agent leaves (a torn last line) and a stray line are skipped and named,
    as a replay skips them; the traces that were read keep their spans."""
    capture = tmp_path / "capture.jsonl"
    lines = EXAMPLE.read_bytes().splitlines(keepends=True)
    capture.write_bytes(
        b"".join(lines[:4]) + b"not a trace\n" + b"".join(lines[4:]) + lines[0][:50]
    )
    scored = tmp_path / "results.jsonl"
    replay(capture, output=scored)
    with caplog.at_level("WARNING", logger="agenteval"):
        data = load_results(scored, capture)
    assert data.unread_capture_lines == [f"{capture}:5", f"{capture}:{len(lines) + 2}"]
    assert [r.getMessage() for r in caplog.records] == [
        f"agenteval: 2 capture line(s) could not be read and were skipped, as a replay skips "
        f"them; the first: {capture}:5: not valid JSON (Invalid JSON: expected ident at line 1 "
        "column 2)"
    ]
    assert set(data.captured) == set(data.traces) == {t.id for t in read_capture(EXAMPLE)}
    # the capture alone: scored, then reported with the same note
    done = report(capture, "--html", tmp_path / "r.html")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert (
        f'id="unread-capture-lines">2 line(s) of the capture could not be read as traces and '
        f"were skipped ({capture}:5, {capture}:{len(lines) + 2}): a scored trace they held "
        "shows no spans in this report.</p>"
    ) in page
    assert page.count("<h4>Timeline</h4>") == 9
    assert 'id="unread-capture-lines"' not in render_html(load_results(scored, EXAMPLE))


def test_a_file_that_is_not_utf8_or_not_json_is_refused_in_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\x83\x00\xff\xfe binary\n")
    done = report(binary, "--html", tmp_path / "r.html")
    assert (done.returncode, done.stderr.strip()) == (
        2,
        f"agenteval: error: {binary}:1: not UTF-8 text; pass the --json output of a replay",
    )
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text('{"trace_id": "t"} trailing words\n')  # whole, but not JSON: refused
    done = report(garbage, "--html", tmp_path / "r.html")
    assert done.returncode == 2
    assert done.stderr.startswith(f"agenteval: error: {garbage}:1: not a JSON line (")
    assert not (tmp_path / "r.html").exists()


def test_report_on_a_capture_scores_it_first(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    done = report(EXAMPLE, "--html", out)
    assert done.returncode == 0, done.stderr
    scored = tmp_path / "r.results.jsonl"
    assert f"is a capture: scored it with the default metrics into {scored}" in done.stdout
    page = out.read_text()
    assert page.startswith("<!doctype html>")
    data = load_results(scored, EXAMPLE)
    assert len(data.traces) == len(data.captured) == 9


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (nox -s tests installs it)")
def test_report_in_headless_chromium(results: Path, tmp_path: Path) -> None:
    page = write_report(results, tmp_path / "report.html", capture=EXAMPLE)
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0
    console = [
        line for line in dom.stderr.splitlines() if ":CONSOLE(" in line or "Uncaught" in line
    ]
    assert console == []  # the page logged nothing to the console
    rendered = dom.stdout
    data = load_results(results)
    scores = [
        r.score
        for _, rs in data.traces.values()
        for r in rs
        if r.name == "coherence" and r.score is not None
    ]
    assert cell(rendered, "coherence", "mean") == f"{sum(scores) / len(scores):.3f}"
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    assert (
        chromium(
            tmp_path, "--window-size=1280,1800", f"--screenshot={shot}", page.as_uri()
        ).returncode
        == 0
    )
    assert shot.stat().st_size > 10_000  # a rendered page, kept for people to look at


def _traces_of_every_ending() -> list[Trace]:
    """One session: a judge-scored healthy run, a run the guard stopped, a run that failed."""
    t0 = 1_767_225_600.0
    weather = ToolCall(
        id="c1", name="get_weather", arguments={"city": "Paris"}, result="sunny, 21°C"
    )
    ok = Trace(
        id="t-ok",
        session_id="s1",
        input="What is the weather in Paris today?",
        output="It is sunny and 21°C in Paris.",
        status=RunStatus.OK,
        start_time=t0,
        end_time=t0 + 1.2,
        spans=[
            Span(id="a1", kind=SpanKind.AGENT, name="agent", start_time=t0, end_time=t0 + 1.2),
            Span(
                id="l1", parent_id="a1", kind=SpanKind.LLM, name="chat gpt-4o",
                input=[{"role": "user", "content": "What is the weather in Paris today?"}],
                start_time=t0 + 0.1, end_time=t0 + 0.5,
            ),
            Span(
                id="w1", parent_id="a1", kind=SpanKind.TOOL, name="get_weather",
                tool_call=weather, start_time=t0 + 0.5, end_time=t0 + 0.7,
            ),
        ],
    )  # fmt: skip
    repeat = ToolCall(name="lookup_order", arguments={"order_id": "A-2001"}, result="pending")
    alert = LoopAlert(
        session_id="s1",
        trace_id="t-stopped",
        pattern="repeated_call",
        count=3,
        calls=[repeat] * 3,
        message='lookup_order called 3 times with the same arguments {"order_id": "A-2001"}',
        stopped=True,
    )
    stopped = Trace(
        id="t-stopped",
        session_id="s1",
        input="Is order A-2001 ready?",
        status=RunStatus.STOPPED,
        status_reason="stopped by the loop guard: lookup_order called 3 times",
        error="AgentLoopError: agenteval stopped the run",
        alerts=[alert],
        start_time=t0 + 10,
        end_time=t0 + 10.3,
        spans=[
            Span(
                id=f"r{i}", kind=SpanKind.TOOL, name="lookup_order", tool_call=repeat,
                start_time=t0 + 10 + i * 0.1, end_time=t0 + 10.05 + i * 0.1,
            )
            for i in range(3)
        ],
    )  # fmt: skip
    failed = Trace(
        id="t-error",
        session_id="s1",
        input="Refund order A-5521",
        status=RunStatus.ERROR,
        error="APIError: upstream returned 500",
        start_time=t0 + 20,
        end_time=t0 + 20.4,
        spans=[
            Span(
                id="e1", kind=SpanKind.LLM, name="chat gpt-4o", error="APIError: upstream returned 500",
                start_time=t0 + 20, end_time=t0 + 20.4,
            )
        ],
    )  # fmt: skip
    return [ok, stopped, failed]


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (nox -s tests installs it)")
def test_report_shows_how_each_run_ended_in_chromium(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    # the judge is sure of every run but the failed refund
    judge_server.responder = lambda request: Reply(
        json.dumps({"score": 0.2 if "A-5521" in json.dumps(request) else 0.9, "reason": "sure"})
    )
    judge = OpenAIJudge(
        "judge-model",
        base_url=judge_server.base_url,
        cache=None,
        prices={"judge-model": (1.0, 2.0)},
    )
    capture = tmp_path / "c.jsonl"
    capture.write_text("".join(t.model_dump_json() + "\n" for t in _traces_of_every_ending()))
    results = tmp_path / "r.jsonl"
    metrics = ["coherence", "confidence", "tool_call_loops", "agent_reliability"]
    replay(capture, metrics, judge=judge, output=results)
    page = write_report(results, tmp_path / "report.html", capture=capture)
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0
    rendered = dom.stdout
    # how each run ended, headed by the user's request
    for status, request in [
        ("ok", "What is the weather in Paris today?"),
        ("stopped", "Is order A-2001 ready?"),
        ("error", "Refund order A-5521"),
    ]:
        assert f'<span class="status {status}">{status}</span> <b>{request}</b>' in rendered
    # each row, collapsed or not, says how the run ended and which metrics it failed
    summaries = dict(
        re.findall(r'<details id="t-([\w-]+)"[^>]*><summary>(.*?)</summary>', rendered)
    )
    assert '<span class="passing">✓</span>' in summaries["t-ok"]
    assert '<span class="failing">' not in summaries["t-ok"]
    assert '<span class="failing">✗ tool_call_loops</span>' in summaries["t-stopped"]
    assert '<span class="failing">✗ confidence</span>' in summaries["t-error"]
    # the alert, the reason the run ended, and the error
    assert (
        "<li>loop alert (repeated_call): lookup_order called 3 times with the same arguments "
        '{"order_id": "A-2001"} (the guard stopped the run)</li>'
    ) in rendered
    assert "<b>Ended</b> stopped by the loop guard: lookup_order called 3 times" in rendered
    assert "<b>Error</b> APIError: upstream returned 500" in rendered
    # a timeline: one bar per span, with durations; messages readable, tool calls with arguments
    assert rendered.count('<div class="bar ') == 3 + 3 + 1
    assert '<td class="num">400 ms</td>' in rendered and '<td class="num">1.20 s</td>' in rendered
    assert "user: What is the weather in Paris today?" in rendered
    assert 'get_weather({"city": "Paris"}) → sunny, 21°C' in rendered
    # the judge's tokens and cost per trace: one confidence call each, of 100 + 20 tokens at
    # $1 / $2 per million: 0.00014 USD
    assert rendered.count("judge 120 tokens, $0.0001") == 3
    # the session over time, with labelled axes; histograms with labelled axes
    assert 'data-metric="agent_reliability"' in rendered and "trace in session" in rendered
    assert '<text x="124" y="78" text-anchor="middle">score</text>' in rendered
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-run-endings.png"
    assert (
        chromium(
            tmp_path, "--window-size=1280,2200", f"--screenshot={shot}", page.as_uri()
        ).returncode
        == 0
    )
    assert shot.stat().st_size > 10_000


@pytest.mark.parametrize(
    "metadata",
    [
        {"per_trace_signals": {"t0": {"step_risk": "high"}}, "flagged_traces": ["t0"]},
        {"per_trace_signals": [["t0", 0.5]], "flagged_traces": ["t0"]},
        {"per_trace_signals": {"t0": {"step_risk": 0.5}}, "flagged_traces": 3},
        {"per_trace_signals": {"t0": "risky"}, "flagged_traces": "t0"},
    ],
    ids=["step-risk-text", "signals-list", "flagged-int", "signals-text"],
)
def test_report_reads_session_metadata_of_the_wrong_type(
    metadata: dict[str, object], tmp_path: Path
) -> None:
    results = tmp_path / "r.jsonl"
    trace = {"trace_id": "t0", "session_id": "s", "results": [_RESULT]}
    session = {"session_id": "s", "session_results": [_RESULT | {"name": "agent_reliability"}]}
    session["session_results"][0]["metadata"] = metadata  # type: ignore[index]
    results.write_text(json.dumps(trace) + "\n" + json.dumps(session) + "\n")
    done = report(results, "--html", tmp_path / "r.html")
    assert (done.returncode, done.stderr) == (0, "")
    assert "s" in (tmp_path / "r.html").read_text()


def test_a_capture_line_with_a_byte_order_mark_is_read_as_a_trace(tmp_path: Path) -> None:
    capture = tmp_path / "c.jsonl"
    line = Trace(id="t1", input="q", output="a").model_dump_json()
    capture.write_bytes(b"\xef\xbb\xbf" + line.encode() + b"\n")
    errors: list[object] = []
    assert [t.id for t in read_capture(capture, on_error=errors.append)] == ["t1"]
    assert errors == []  # read, not reported as bad (it was both before)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (nox -s tests installs it)")
def test_long_unbroken_strings_do_not_widen_the_report(tmp_path: Path) -> None:
    word = "x" * 5_000
    capture = tmp_path / "c.jsonl"
    trace = Trace(
        id="t1",
        input=word,
        output=word,
        spans=[Span(kind=SpanKind.TOOL, name=word[:300], output=word, error=word)],
    )
    capture.write_text(trace.model_dump_json() + "\n")
    results = tmp_path / "r.jsonl"
    replay(capture, output=results)
    page = write_report(results, tmp_path / "report.html", capture=capture)
    width = _laid_out(tmp_path, page, "document.documentElement.scrollWidth")
    assert int(width) <= 1024  # no sideways scrolling


def _laid_out(tmp_path: Path, page: Path, measure: str) -> str:
    """What the JavaScript expression ``measure`` gives on ``page`` laid out 1024 pixels
    wide, every trace opened: the same page with a script that writes it into the DOM (the
    report itself runs none: its policy forbids scripts)."""
    text = re.sub(r"<meta http-equiv=.Content-Security-Policy[^>]*>", "", page.read_text())
    probe = tmp_path / "probe.html"
    probe.write_text(
        text.replace(
            "</body>",
            "<script>for (const d of document.querySelectorAll('details')) d.open = true;"
            f"document.body.dataset.measured = JSON.stringify({measure});</script></body>",
        )
    )
    dom = chromium(tmp_path, "--window-size=1024,800", "--dump-dom", probe.as_uri())
    found = re.search(r'data-measured="([^"]*)"', dom.stdout)
    assert found is not None, dom.stderr[-2000:]
    return html.unescape(found.group(1))


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (nox -s tests installs it)")
def test_a_timeline_keeps_its_short_words_whole_beside_a_long_output(tmp_path: Path) -> None:
    t0 = 1_767_225_600.0
    result = " ".join(f"order A-{n} shipped with DHL on 3 January" for n in range(40))
    trace = Trace(
        id="t1",
        input="Where are my orders?",
        output="All shipped.",
        start_time=t0,
        end_time=t0 + 2,
        spans=[
            Span(id="a", kind=SpanKind.AGENT, name="agent", start_time=t0, end_time=t0 + 2),
            Span(
                id="t", parent_id="a", kind=SpanKind.TOOL, name="lookup_order", output=result,
                error="timeout", start_time=t0 + 0.5, end_time=t0 + 1.5,
            ),
        ],
    )  # fmt: skip
    capture = tmp_path / "c.jsonl"
    capture.write_text(trace.model_dump_json() + "\n")
    results = tmp_path / "r.jsonl"
    replay(capture, output=results)
    page = write_report(results, tmp_path / "report.html", capture=capture)
    # the lines each cell of the timeline but the long one is laid out on (a text's line
    # boxes: one per line it takes)
    lines = json.loads(
        _laid_out(
            tmp_path,
            page,
            "[...document.querySelectorAll('table.spans th, table.spans td:not(.detail)')]"
            ".filter(c => c.textContent.trim()).map(c => {const r = document.createRange();"
            " r.selectNodeContents(c); return [c.textContent.trim(), new Set("
            "[...r.getClientRects()].map(b => Math.round(b.top))).size];})",
        )
    )
    assert lines == [
        ["kind", 1], ["name", 1], ["when", 1], ["took", 1], ["in / out", 1], ["error", 1],
        ["agent", 1], ["agent", 1], ["2.00 s", 1],
        ["tool", 1], ["lookup_order", 1], ["1.00 s", 1], ["timeout", 1],
    ]  # fmt: skip


def test_every_text_a_run_controls_is_escaped(tmp_path: Path) -> None:
    evil = '<img src=x onerror="alert(1)">'
    trace = Trace.from_steps(
        f"question {evil}",
        [
            AgentStep(
                thought=evil,
                tool_calls=[ToolCall(name=f"tool{evil}", arguments={"q": evil}, result=evil)],
            ),
            AgentStep(output=f"answer {evil}"),
        ],
        session_id=f"session{evil}",
        id=f"trace{evil}",
        status_reason=evil,
        error=evil,
    )
    capture = tmp_path / "c.jsonl"
    capture.write_text(trace.to_json() + "\n")
    results = tmp_path / "r.jsonl"
    replay(capture, ["coherence", "agent_reliability"], output=results)
    page = render_html(load_results(results, capture))
    # the run's text is in the page, escaped, wherever it appears (request, answer, ids,
    # session, tool name, arguments and result, reason, error)
    assert "<img" not in page and 'onerror="' not in page
    assert page.count("&lt;img src=x onerror=&#34;alert(1)&#34;&gt;") >= 8


def _result(name: str, score: float, threshold: float = 0.5) -> dict[str, object]:
    return {
        "name": name,
        "version": "1",
        "score": score,
        "threshold": threshold,
        "success": score >= threshold,
        "reason": "",
    }


def test_a_large_results_file_is_aggregated_whole_and_listed_in_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1,200 traces in 150 sessions of 8: the table covers every one, the page lists 500 of
    # them (the 30 that failed first) and shows 100 sessions; memory holds no more than that
    monkeypatch.setattr("agenteval_core.report._report.MAX_CELLS", 5)
    lines, failed = [], []
    for index in range(1200):
        session = f"s{index // 8:03d}"
        score = 0.2 if index % 40 == 7 else 0.9  # 30 traces fail coherence
        if score < 0.5:
            failed.append(f"t{index:04d}")
        lines.append(
            {
                "trace_id": f"t{index:04d}",
                "session_id": session,
                "status": "ok",
                "results": [_result("coherence", score), _result("loop_detection", 1.0)],
                "session_scores": {"agent_reliability": 1 - (index % 8) / 10},
            }
        )
        if index % 8 == 7:
            lines.append(
                {"session_id": session, "session_results": [_result("agent_reliability", 0.3)]}
            )
    lines.append(lines[0])  # a trace's line appended twice: counted once
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(line) + "\n" for line in lines))
    data = load_results(results)
    assert (data.trace_count, data.session_count, data.repeated_traces) == (1200, 150, 1)
    listed = list(data.traces)
    assert len(listed) == 500 and listed[:2] == ["t0000", "t0001"]  # in the order scored
    assert set(failed) <= set(listed)
    passing = [t for t in listed if t not in failed]
    assert passing == [f"t{i:04d}" for i in range(1200) if f"t{i:04d}" not in failed][:470]
    assert list(data.sessions) == [f"s{i:03d}" for i in range(100)]
    assert [(m.trace_id, m.scores) for m in data.members["s000"]] == [
        (f"t{i:04d}", {"agent_reliability": 1 - i / 10}) for i in range(8)
    ]
    page = render_html(data)
    assert '<span id="trace-count">1200</span>' in page
    assert '<span id="session-count">150</span>' in page
    mean = (30 * 0.2 + 1170 * 0.9) / 1200
    assert cell(page, "coherence", "mean") == f"{mean:.3f}"
    assert cell(page, "coherence", "scored") == "1200"
    assert cell(page, "coherence", "pass_rate") == f"{1170 / 1200:.3f}"
    assert cell(page, "agent_reliability", "scored") == "150"
    assert "500 of 1200 traces are listed" in page
    # every session scored 0.3: the 100 shown are the first, in file order
    assert "The 100 lowest-scoring of 150 sessions are shown, lowest first." in page
    assert "1 trace(s), 0 session(s)" in page
    assert page.count("… 3 more") == 100  # each shown session draws 5 of its 8 squares
    assert page.count('<details id="t-') == 500
    # a square of a trace that is not listed links nowhere: t0792 opens session s099, and the
    # passing traces listed end at t0481
    assert "t0792" not in listed and "t0000" in listed
    assert 'href="#t-t0792"' not in page and 'title="t0792 risk' in page
    assert re.search(r'<span class="cell" style="[^"]*" title="t0792 risk', page)
    assert re.search(r'<a href="#t-t0000" class="cell" style="[^"]*" title="t0000 risk', page)


def test_the_sessions_shown_are_the_lowest_and_their_flagged_traces_are_listed(
    tmp_path: Path,
) -> None:
    # 150 sessions of 8 traces, every trace failing coherence: the page showed the first
    # 100 sessions and listed the first 500 traces, so the sessions agent_reliability scored
    # lowest, the last ten in the file, were not shown, and their flagged traces not listed
    lines: list[dict[str, object]] = []
    for number in range(150):
        session = f"s{number:03d}"
        for turn in range(8):
            trace_id = f"t{number:03d}-{turn}"
            lines.append(
                {
                    "trace_id": trace_id,
                    "session_id": session,
                    "status": "ok",
                    "results": [_result("coherence", 0.2)],
                }
            )
        worst = number >= 140
        reliability = _result("agent_reliability", 0.1 + (number - 140) / 100 if worst else 0.8)
        reliability["metadata"] = {"flagged_traces": [f"{session}-7".replace("s", "t", 1)]}
        lines.append({"session_id": session, "session_results": [reliability]})
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(line) + "\n" for line in lines))
    data = load_results(results)
    shown = list(data.sessions)
    assert shown[:10] == [f"s{n}" for n in range(140, 150)]  # lowest first: 0.10, 0.11, ...
    assert shown[10:] == [f"s{n:03d}" for n in range(90)]  # then the first of the 0.8s
    listed = list(data.traces)
    # the first 500 that failed, then the flagged ones of shown sessions, in file order
    flagged = [f"t{n:03d}-7" for n in [*range(62, 90), *range(140, 150)]]
    assert listed == [f"t{n:03d}-{t}" for n in range(63) for t in range(8)][:500] + flagged
    assert data.traces["t149-7"] == (
        "s149",
        [MetricResult.model_validate(_result("coherence", 0.2))],
    )
    page = render_html(data)
    assert "The 100 lowest-scoring of 150 sessions are shown, lowest first." in page
    assert '<a href="#t-t149-7" class="cell flagged"' in page  # a square that opens it
    assert '<details id="t-t149-7">' in page


def test_a_live_results_file_shows_its_open_sessions_with_their_scores_so_far(
    tmp_path: Path,
) -> None:
    # a server's evaluator writes its results file for weeks; its sessions close at close()
    # or past max_open_sessions. A report read meanwhile shows the open ones, marked open
    from agenteval_core import OnlineEvaluator

    path = tmp_path / "results.jsonl"
    evaluator = OnlineEvaluator(
        capture=tmp_path / "capture.jsonl", results_path=path, log=False, max_open_sessions=1
    )
    try:
        for session, text in (("a", "one"), ("a", "two"), ("b", "three")):  # b closes a
            evaluator.submit(Trace(session_id=session, input=f"say {text}", output=f"{text}"))
        assert evaluator.flush(20)
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        so_far = [line["session_scores"] for line in lines if line.get("session_id") == "b"]
        assert len(so_far) == 1 and isinstance(so_far[0]["agent_reliability"], float)
        live = load_results(path)
        assert (live.trace_count, live.session_count, live.open_session_count) == (3, 1, 1)
        assert list(live.sessions) == ["a"] and live.open_sessions == {"b": so_far[0]}
        assert [m.trace_id for m in live.members["b"]] == [lines[-1]["trace_id"]]
        page = render_html(live)
        assert '<span id="open-session-count">1</span> still open' in page
        assert 'id="open-sessions"' in page
        reliability = f"{so_far[0]['agent_reliability']:.3f}"
        assert re.search(
            rf'data-session="b">.*?\(open\).*?so far: agent_reliability {reliability}', page
        )
        assert re.search(r'data-session="b">.*?style="background:#a7adba"', page)  # grey
        assert not re.search(r'data-session="a">[^\n]*\(open\)', page)
    finally:
        evaluator.close()
    closed = load_results(path)
    assert (closed.session_count, closed.open_session_count, closed.open_sessions) == (2, 0, {})
    # no trace came after: the closing results are the scores it had so far
    [final] = [r for r in closed.sessions["b"] if r.name == "agent_reliability"]
    assert final.score == so_far[0]["agent_reliability"]
    assert "still open" not in render_html(closed)


def test_a_session_that_closed_and_came_back_is_shown_part_by_part(tmp_path: Path) -> None:
    # a session ended (end_session, idle, or past the open-sessions limit) and then had more
    # traces used to lose its later parts: each closing line after the first was read as
    # the same results appended twice, and the page showed the first conversation alone
    def trace(trace_id: str, reliability: float) -> dict[str, object]:
        return {
            "trace_id": trace_id,
            "session_id": "u1",
            "status": "ok",
            "results": [_result("coherence", 0.9)],
            "session_scores": {"agent_reliability": reliability},
        }

    def closing(reliability: float) -> dict[str, object]:
        return {"session_id": "u1", "session_results": [_result("agent_reliability", reliability)]}

    lines = [
        trace("t1", 0.95),
        trace("t2", 0.9),
        closing(0.9),
        trace("t3", 0.4),
        closing(0.4),
        closing(0.4),  # the same results appended twice: read once
        trace("t4", 0.7),  # a third part, still open
    ]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(line) + "\n" for line in lines))
    data = load_results(results)
    assert (data.session_count, data.repeated_sessions, data.open_session_count) == (2, 1, 1)
    assert {key: [r.score for r in rs] for key, rs in data.sessions.items()} == {
        "u1": [0.9],
        "u1 · part 2": [0.4],
    }
    assert data.open_sessions == {"u1 · part 3": {"agent_reliability": 0.7}}
    assert {key: [m.trace_id for m in ms] for key, ms in data.members.items()} == {
        "u1": ["t1", "t2"],
        "u1 · part 2": ["t3"],
        "u1 · part 3": ["t4"],
    }
    page = render_html(data)
    assert [re.sub(r"<[^>]+>", "", m) for m in re.findall(r'data-session="([^"]*)"', page)] == [
        "u1",
        "u1 · part 2",
        "u1 · part 3",
    ]
    assert cell(page, "agent_reliability", "mean") == f"{(0.9 + 0.4) / 2:.3f}"
