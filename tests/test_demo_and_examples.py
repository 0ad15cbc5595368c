"""The README's demo command and the LangChain examples run offline and show what they promise."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from agenteval_core import read_capture

ROOT = Path(__file__).resolve().parents[1]


def test_demo_shows_live_scores_and_a_loop_alert(tmp_path: Path) -> None:
    capture = tmp_path / "demo.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "agenteval_core.cli", "demo", "--capture", str(capture)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.count("scored in the background") == 4
    assert "LOOP ALERT (repeated_call): lookup_order called 3 times" in out
    assert "guard stopped the run" in out
    assert "agent_reliability" in out
    traces = list(read_capture(capture))
    assert len(traces) == 4 and all(t.session_id == "demo-session" for t in traces)
    assert "AgentLoopError" in (traces[-1].error or "")
    assert "Traceback" not in done.stderr and "Error in" not in done.stderr
    # the stopped run reads as failed: in the terminal and in the report
    assert "run stopped: stopped by the loop guard" in out
    assert "not scored: coherence, loop_detection" in out
    html = tmp_path / "report.html"
    made = subprocess.run(
        [sys.executable, "-m", "agenteval_core.cli", "report", str(capture), "--html", str(html)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    page = html.read_text()
    assert page.count('<span class="status ok">ok</span>') == 3
    assert page.count('<span class="status stopped">stopped</span>') == 1
    assert "<b>Is my second order A-2001 ready yet?</b>" in page
    results = [
        json.loads(line) for line in html.with_suffix(".results.jsonl").read_text().splitlines()
    ]
    stopped = next(r for r in results if r.get("status") == "stopped")
    assert {r["name"]: (r["score"], r["skipped"]) for r in stopped["results"]} == {
        "parameter_correctness": (1.0, False),
        "tool_call_loops": (0.0, False),
        # 3 calls of lookup_order, the third refused by the guard (a failure the stopped run
        # never recovered from): 1 − (1 failed + 1 unrecovered) / (2 · 3)
        "tool_failures": (pytest.approx(2 / 3), False),
        "coherence": (None, True),
        "loop_detection": (None, True),
    }
    reliability = next(r["session_results"] for r in results if r.get("session_results"))
    assert next(r for r in reliability if r["name"] == "agent_reliability")["success"] is False


@pytest.mark.parametrize(
    "name",
    [
        "langchain_quickstart.py",
        "langchain_loop_alert.py",
        "llamaindex_quickstart.py",
        "crewai_quickstart.py",
    ],
)
def test_examples_run(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        runpy.run_path(str(ROOT / "examples" / name), run_name="__main__")
    finally:
        os.chdir(cwd)
    printed = capsys.readouterr()
    out = printed.out
    if name == "langchain_loop_alert.py":
        assert "ALERT: check_status called 3 times" in out
        assert "stopped: repeated_call 3 calls" in out
        return
    assert "It is sunny and 21°C in Paris." in out
    # the console sink: a line for the scored trace, then the summary with the report command
    lines = printed.err.splitlines()
    assert lines[0].startswith("agenteval: trace ") and "session user-42 [ok]" in lines[0]
    assert "coherence" in lines[0] and "tool_call_loops 1.00" in lines[0]
    assert lines[1].startswith("agenteval: 1 trace(s) scored")
    assert lines[2].endswith(": agenteval report " + lines[2].split("capture ")[1].split(";")[0])
    capture = {
        "langchain_quickstart.py": "quickstart-capture.jsonl",
        "llamaindex_quickstart.py": "llamaindex-capture.jsonl",
        "crewai_quickstart.py": "crewai-capture.jsonl",
    }[name]
    [trace] = read_capture(tmp_path / capture)
    assert trace.session_id == "user-42"
    assert [(c.name, c.arguments) for c in trace.tool_calls()] == [
        ("get_weather", {"city": "Paris"})
    ]


def test_the_guard_stop_is_one_line_naming_the_alert(tmp_path: Path) -> None:
    """Not LangChain's "Error in AgentEvalCallbackHandler.on_tool_start callback" line."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "langchain_loop_alert.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    [line] = done.stderr.splitlines()
    assert re.fullmatch(
        r"agenteval loop alert \(session s-1, trace [0-9a-f]{32}\): check_status called 3 times "
        r'with the same arguments \{"job_id": "job-7"\}; stopped the run',
        line,
    ), line
    # the alert callback runs on the evaluator's thread: either line may come first
    assert sorted(done.stdout.splitlines()) == [
        'ALERT: check_status called 3 times with the same arguments {"job_id": "job-7"}',
        "stopped: repeated_call 3 calls",
    ]
