"""Calibration against human labels: agreement, kappa and the best threshold, worked out by
hand, with a scripted judge on the loopback server; and the command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from judge_server import JudgeServer, Reply

from agenteval_core import CalibrationReport, CaptureError, Trace, calibrate, read_labels, replay
from agenteval_core.cli import cli
from agenteval_core.judges import OpenAIJudge

ROOT = Path(__file__).resolve().parents[1]

# confidence scores the scripted judge gives q0..q9; q0-q4 are labelled pass, q5-q9 fail
SCORES = [0.9, 0.8, 0.7, 0.6, 0.45, 0.55, 0.3, 0.2, 0.1, 0.0]


def _scripted(request: dict[str, Any]) -> Reply:
    text = request["messages"][1]["content"]
    index = int(text.split("user input: q")[1].split()[0])
    return Reply(json.dumps({"score": SCORES[index], "reason": "r"}))


def _labels_file(path: Path, labels: list[Any]) -> Path:
    lines = [
        json.dumps(
            {"trace": Trace(id=f"t{i}", input=f"q{i}", output="a").model_dump(mode="json"),
             "metric": "confidence", "label": label}
        )
        for i, label in enumerate(labels)
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_pass_fail_labels_agreement_kappa_and_best_threshold(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    judge_server.responder = _scripted
    labels = read_labels(_labels_file(tmp_path / "l.jsonl", ["pass"] * 5 + ["fail"] * 5))
    judge = OpenAIJudge("judge-model", base_url=judge_server.base_url, cache=None)
    [result] = calibrate(labels, judge=judge).metrics.values()
    # at confidence's threshold 0.5: q0-q3 and q5 pass → 4 agree pass, q4 missed, q5 wrongly
    # passed, q6-q9 agree fail: agreement 8/10. Kappa: p_o = 0.8; both sides pass half the
    # time, so p_e = 0.5 × 0.5 + 0.5 × 0.5 = 0.5, and kappa = (0.8 − 0.5) / (1 − 0.5) = 0.6
    assert (result.labelled, result.scored, result.agreement) == (10, 10, 0.8)
    assert result.kappa == pytest.approx(0.6)
    assert result.confusion == {"pass": {"pass": 4, "fail": 1}, "fail": {"pass": 1, "fail": 4}}
    # at 0.45 (q0-q5 pass) and at 0.6 (q0-q3 pass) 9 of 10 agree; 0.45 is nearer 0.5
    assert (result.best_threshold, result.best_agreement) == (0.45, 0.9)


def test_labels_that_fail_every_trace_find_a_threshold_above_every_score(
    judge_server: JudgeServer, tmp_path: Path
) -> None:
    judge_server.responder = _scripted
    # q0-q3 score 0.9, 0.8, 0.7, 0.6 and are all labelled fail: at 0.5 all pass, none agree
    labels = read_labels(_labels_file(tmp_path / "l.jsonl", ["fail"] * 4))
    judge = OpenAIJudge("judge-model", base_url=judge_server.base_url, cache=None)
    [result] = calibrate(labels, judge=judge).metrics.values()
    assert (result.agreement, result.confusion["fail"]) == (0.0, {"pass": 4, "fail": 0})
    # a score as the threshold passes at least that trace (the best of those, 0.9, agrees on
    # 3 of 4); only a threshold above 0.9 fails all four: halfway to 1
    assert (result.best_threshold, result.best_agreement) == (0.95, 1.0)


def test_a_label_is_scored_after_the_earlier_turns_of_its_session(tmp_path: Path) -> None:
    offer = {"input": "Where is my order A-1?", "output": "Your order A-1 has shipped."}
    check = {"input": "Where is order B-7?", "output": "Order B-7 is in the warehouse."}
    capture = tmp_path / "capture.jsonl"
    runs = [
        Trace(id="t1", session_id="s1", **offer),
        Trace(id="t3", session_id="s2", **check),
        # the same answer again, to another question: a loop
        Trace(id="t2", session_id="s1", input="And order A-2?", output=offer["output"]),
        Trace(id="t4", session_id="s2", input="And now?", output="Order B-7 left this morning."),
    ]
    capture.write_text("".join(run.model_dump_json() + "\n" for run in runs))
    verdicts = {"t1": "pass", "t2": "fail", "t3": "pass", "t4": "pass"}
    path = tmp_path / "labels.jsonl"
    path.write_text(
        "".join(
            json.dumps({"trace_id": tid, "metric": "loop_detection", "label": label}) + "\n"
            for tid, label in verdicts.items()
        )
    )
    labels = read_labels(path, capture=capture)
    assert [label.conversation for label in labels] == [(), (offer,), (), (check,)]
    [result] = calibrate(labels).metrics.values()
    # t2 repeats t1's answer word for word: 1 − cosine × Jaccard = 0, a failure, as labelled
    # (scored alone it had nothing to repeat and passed); t4 says something new. 4 of 4
    # agree, and kappa is 1: p_o = 1, p_e = 0.75² + 0.25² = 0.625, (1 − 0.625) / (1 − 0.625)
    assert (result.agreement, result.kappa) == (1.0, 1.0)
    assert result.confusion == {"pass": {"pass": 3, "fail": 0}, "fail": {"pass": 0, "fail": 1}}

    # a label that holds its trace gives the turns before it itself
    inline = tmp_path / "inline.jsonl"
    line = {"trace": runs[2].model_dump(mode="json"), "metric": "loop_detection", "label": "fail"}
    inline.write_text(json.dumps({**line, "conversation": [offer]}) + "\n")
    [label] = read_labels(inline)
    assert label.conversation == (offer,)
    [result] = calibrate([label]).metrics.values()
    assert (result.agreement, result.confusion["fail"]) == (1.0, {"pass": 0, "fail": 1})
    inline.write_text(json.dumps({**line, "conversation": offer}) + "\n")
    with pytest.raises(CaptureError) as refused:
        read_labels(inline)
    assert str(refused.value) == (
        f"{inline}:1: 'conversation' must be a list of turns, each an object with 'input' "
        "and 'output', oldest first"
    )


def test_graded_labels_weighted_kappa(judge_server: JudgeServer, tmp_path: Path) -> None:
    judge_server.responder = _scripted
    # judge: q0 0.9 → grade 1.0, q1 0.8 → 0.75, q2 0.7 → 0.75, q3 0.6 → 0.5
    labels = read_labels(_labels_file(tmp_path / "l.jsonl", [1.0, 0.5, 0.0, 1.0]))
    judge = OpenAIJudge("judge-model", base_url=judge_server.base_url, cache=None)
    [result] = calibrate(labels, judge=judge).metrics.values()
    # grades (of 0..4) labels [4, 2, 0, 4], judge [4, 3, 3, 2]; quadratic weights (i−j)²/16.
    # observed: (0 + 1 + 9 + 4) / 16 / 4 = 14/64. Marginals: labels 4: ½, 2: ¼, 0: ¼;
    # judge 4: ¼, 3: ½, 2: ¼. Expected: ½(¼·0 + ½·1 + ¼·4)/16 + ¼(¼·4 + ½·1 + ¼·0)/16
    # + ¼(¼·16 + ½·9 + ¼·4)/16 = (0.75 + 0.375 + 2.375) / 16 = 3.5/16 = 14/64 → kappa 0
    assert result.graded and result.kappa == pytest.approx(0.0)
    assert result.mean_absolute_error == pytest.approx((0.1 + 0.3 + 0.7 + 0.4) / 4)
    assert result.confusion["1"] == {"0": 0, "0.25": 0, "0.5": 1, "0.75": 0, "1": 1}
    # pass/fail at 0.5: labels T T F T, judge T T T T → 3 of 4
    assert result.agreement == 0.75


def test_labels_by_trace_id_and_bad_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    capture = ROOT / "examples" / "captures" / "support_agent.jsonl"
    good = tmp_path / "l.jsonl"
    good.write_text('{"trace_id": "session-1-t0", "metric": "coherence", "label": "pass"}\n')
    [label] = read_labels(good, capture=capture)
    assert (label.trace.input, label.metric, label.label) == (
        "Where is my order A-1042?",
        "coherence",
        True,
    )
    bad = tmp_path / "bad.jsonl"
    for line, message in [
        ('{"trace_id": "nope", "metric": "coherence", "label": "pass"}', "is not in"),
        ('{"trace_id": "session-1-t0", "metric": "coherence", "label": "maybe"}', "'label' must"),
        ('{"trace_id": "session-1-t0", "label": "pass"}', "'metric' must name a metric"),
    ]:
        bad.write_text(line + "\n")
        with pytest.raises(CaptureError, match=f"{bad}:1: .*{message}"):
            read_labels(bad, capture=capture)
    # a capture whose writer was killed mid-line: read as a replay reads it, the torn line
    # skipped and said; a label of the trace it held says where that trace may have been
    lines = capture.read_bytes().splitlines(keepends=True)
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(b"".join(lines[:3]) + lines[3][:60])
    lost = json.loads(lines[3])["id"]
    with caplog.at_level("WARNING", logger="agenteval"):
        [label] = read_labels(good, capture=torn)
    assert label.trace.input == "Where is my order A-1042?"
    assert [r.getMessage() for r in caplog.records] == [
        "agenteval: 1 capture line(s) could not be read and were skipped, as a replay skips "
        f"them; the first: {torn}:4: truncated last line (the writer stopped mid-line)"
    ]
    bad.write_text(f'{{"trace_id": "{lost}", "metric": "coherence", "label": "pass"}}\n')
    with pytest.raises(CaptureError) as refused:
        read_labels(bad, capture=torn)
    assert str(refused.value) == (
        f"{bad}:1: trace_id {lost!r} is not in {torn} (or on one of the 1 line(s) of it "
        "that could not be read)"
    )


def test_the_shipped_example_labels_calibrate_from_the_command_line() -> None:
    done = subprocess.run(
        [
            sys.executable, "-m", "agenteval_core.cli", "calibrate",
            str(ROOT / "examples" / "labels" / "support_agent_labels.jsonl"),
            "--capture", str(ROOT / "examples" / "captures" / "support_agent.jsonl"),
        ],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "100"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "coherence" in done.stdout and "rows are the labels, columns the metric" in done.stdout


def test_a_calibration_shows_in_the_html_report(judge_server: JudgeServer, tmp_path: Path) -> None:
    judge_server.responder = _scripted
    labels = _labels_file(tmp_path / "l.jsonl", ["pass"] * 5 + ["fail"] * 5)
    command = [
        "calibrate", str(labels), "--json", str(tmp_path / "calibration.json"),
        "--judge-model", "judge-model", "--judge-base-url", judge_server.base_url, "--no-cache",
    ]  # fmt: skip
    done = CliRunner().invoke(cli, command)
    assert done.exit_code == 0, done.output
    saved = CalibrationReport.load(tmp_path / "calibration.json")
    [item] = saved.metrics.values()  # the figures worked out by hand above, read back
    assert (item.agreement, round(item.kappa or 0, 6), item.best_threshold) == (0.8, 0.6, 0.45)
    assert item.confusion == {"pass": {"pass": 4, "fail": 1}, "fail": {"pass": 1, "fail": 4}}

    # the labelled runs, scored: the report's confidence column links to its calibration
    capture = tmp_path / "capture.jsonl"
    capture.write_text(
        "".join(
            Trace(id=f"t{i}", input=f"q{i}", output="a").model_dump_json() + "\n" for i in range(10)
        )
    )
    results = tmp_path / "results.jsonl"
    judge = OpenAIJudge("judge-model", base_url=judge_server.base_url, cache=None)
    replay(capture, ["confidence"], judge=judge, output=results)
    page = tmp_path / "report.html"
    shown = CliRunner().invoke(
        cli,
        [
            "report",
            str(results),
            "--html",
            str(page),
            "--calibration",
            str(tmp_path / "calibration.json"),
        ],
    )
    assert shown.exit_code == 0, shown.output
    text = page.read_text()
    assert (
        '<tr data-metric="confidence"><td>confidence <a class="cal" href="#cal-confidence" '
        'title="agreement with human labels">κ 0.600</a></td>'
    ) in text
    row = re.search(
        r'<tr id="cal-confidence" data-calibration="confidence">(.*?)</tr>', text, re.DOTALL
    )
    assert row is not None
    cells = re.findall(r'data-field="(\w+)">([^<]*)<', row.group(1))
    assert cells == [("agreement", "0.800"), ("kappa", "0.600"), ("best", "0.450 (0.900)")]
    assert "label pass" in text and "metric fail" in text

    (tmp_path / "bad.json").write_text('{"results": []}')
    refused = CliRunner().invoke(
        cli,
        ["report", str(results), "--html", str(page), "--calibration", str(tmp_path / "bad.json")],
    )
    assert refused.exit_code != 0
    assert "bad.json: not a calibration report" in refused.output
