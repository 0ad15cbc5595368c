"""best_of: pairwise tournament with positions swapped, against the scripted judge server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from judge_server import JudgeServer, Reply

from agenteval_core import (
    CaptureWriter,
    MetricInputError,
    RunStatus,
    Trace,
    best_of,
    read_capture,
)
from agenteval_core.judges import OpenAIJudge


def judge(server: JudgeServer) -> OpenAIJudge:
    return OpenAIJudge("judge-model", base_url=server.base_url, cache=None, backoff_base=0.01)


def always_a(request: dict[str, Any]) -> Reply:
    """A judge with a pure position bias: it always prefers the first answer shown."""
    return Reply(json.dumps({"winner": "A", "reason": "first is better"}))


def test_clear_winner_and_win_rates(judge_server: JudgeServer) -> None:
    # 2 inputs × 3 pairs × 2 orders = 12 judge calls; "good" beats both others on both inputs,
    # "ok" beats "bad": good 4/4 = 1.0, ok 2/4 = 0.5, bad 0/4 = 0.0
    answers = {"good": ["g1", "g2"], "ok": ["o1", "o2"], "bad": ["b1", "b2"]}
    order = {"g1": 3, "g2": 3, "o1": 2, "o2": 2, "b1": 1, "b2": 1}

    def respond(request: dict[str, Any]) -> Reply:
        text = request["messages"][1]["content"]
        a = text.split("<<<DATA answer_A\n")[1].split("\nDATA>>>")[0]
        b = text.split("<<<DATA answer_B\n")[1].split("\nDATA>>>")[0]
        return Reply(json.dumps({"winner": "A" if order[a] > order[b] else "B", "reason": "r"}))

    judge_server.responder = respond
    result = best_of(["q1", "q2"], answers, judge(judge_server))
    assert len(judge_server.requests) == 12
    assert result.win_rates == {"good": 1.0, "ok": 0.5, "bad": 0.0}
    assert result.winner == "good" and result.tied == []


def test_position_bias_cancels_into_ties(judge_server: JudgeServer) -> None:
    judge_server.responder = always_a
    result = best_of(["q"], {"x": ["x1"], "y": ["y1"]}, judge(judge_server))
    # A wins in both orders means each agent won once: the orders disagree → a tie
    assert result.comparisons[0].winner is None
    assert result.win_rates == {"x": 0.5, "y": 0.5}
    assert result.winner is None and result.tied == ["x", "y"]


def test_bad_input() -> None:
    with pytest.raises(MetricInputError, match="at least two agents"):
        best_of(["q"], {"solo": ["a"]}, judge=None)  # type: ignore[arg-type]
    with pytest.raises(MetricInputError, match="has 1 answers for 2 inputs"):
        best_of(["q1", "q2"], {"x": ["a"], "y": ["b", "c"]}, judge=None)  # type: ignore[arg-type]


def _capture(path: Any, runs: list[tuple[str, str]]) -> None:
    from agenteval_core import Trace

    path.write_text("".join(Trace(input=q, output=a).model_dump_json() + "\n" for q, a in runs))


def _compare(server: JudgeServer, *captures: Path) -> subprocess.CompletedProcess[str]:
    """``agenteval compare`` of ``captures``, judged by ``server``, as a user runs it."""
    return subprocess.run(
        [
            sys.executable, "-m", "agenteval_core.cli", "compare", *map(str, captures),
            "--judge-model", "judge-model", "--judge-base-url", server.base_url,
            "--judge-api-key", "test-key", "--no-cache",
        ],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip


def good_wins(request: dict[str, Any]) -> Reply:
    """A judge that prefers an answer that says "good" (a tie when both or neither do)."""
    text = request["messages"][1]["content"]
    a = text.split("<<<DATA answer_A\n")[1].split("\nDATA>>>")[0]
    b = text.split("<<<DATA answer_B\n")[1].split("\nDATA>>>")[0]
    winner = "tie" if ("good" in a) == ("good" in b) else ("A" if "good" in a else "B")
    return Reply(json.dumps({"winner": winner, "reason": "r"}))


def win_rates(stdout: str) -> list[list[str]]:
    """The rows of ``agenteval compare``'s table: agent, win rate, wins, ties."""
    rows = [line.split("│")[1:5] for line in stdout.splitlines() if "│ agent_" in line]
    return [[cell.strip() for cell in row] for row in rows]


def test_compare_command_runs_the_tournament_over_captures(
    judge_server: JudgeServer, tmp_path: Any
) -> None:
    judge_server.responder = good_wins
    # q1, q2: only agent_a answers well (a win each); q3: both do (a tie); q4: only agent_b ran it
    _capture(tmp_path / "agent_a.jsonl", [("q1", "good 1"), ("q2", "good 2"), ("q3", "good 3")])
    # agent_a paused q1 for a human's approval first: the paused run has no answer yet (it
    # was judged as agent_a's answer, an empty one, and the resumed run's answer left out as
    # the request asked again); a run still going when its evaluator closed, neither
    paused = Trace(input="q1", status=RunStatus.INTERRUPTED, status_reason="waiting for a human")
    cut = Trace(input="q2", status=RunStatus.UNFINISHED, status_reason="evaluator closed")
    (tmp_path / "agent_a.jsonl").write_text(
        paused.model_dump_json() + "\n" + cut.model_dump_json() + "\n"
        + (tmp_path / "agent_a.jsonl").read_text()
    )  # fmt: skip
    with (tmp_path / "agent_a.jsonl").open("a") as torn:  # agent_a was killed mid-write
        torn.write(Trace(input="q4", output="good 4").model_dump_json()[:40])
    # agent_b's runs as a capture directory: q1 asked again later, in a shard read first;
    # a request's first answer is the one that came first
    with CaptureWriter(tmp_path / "agent_b", shards=2) as writer:
        for at, (q, a) in enumerate(
            [("q1", "poor 1"), ("q2", "poor 2"), ("q3", "good 3"), ("q4", "good 4")]
        ):
            writer.write(Trace(input=q, output=a, session_id="early", start_time=at))
        writer.write(Trace(input="q1", output="good 1", session_id="again", start_time=9))
    shards = sorted((tmp_path / "agent_b").iterdir())
    assert [t.session_id for t in read_capture(shards[0])] == ["again"]
    done = _compare(judge_server, tmp_path / "agent_a.jsonl", tmp_path / "agent_b")
    assert done.returncode == 0, done.stderr
    # the torn line is skipped as a replay skips it, and said
    assert done.stderr == (
        "agenteval: 1 capture line(s) could not be read and were skipped, as a replay skips "
        f"them; the first: {tmp_path / 'agent_a.jsonl'}:6: truncated last line (the writer "
        "stopped mid-line)\n"
    )
    assert len(judge_server.completions) == 6  # 3 shared requests x 1 pair x 2 orders
    assert win_rates(done.stdout) == [
        ["agent_a", "0.833", "2", "1"],  # (2 wins + 1 tie / 2) / 3
        ["agent_b", "0.167", "0", "1"],  # (0 + 1 / 2) / 3
    ]
    assert "requests not answered by every agent were left out: agent_b 1" in done.stdout
    assert (
        "runs that asked a request again were left out (each request's first answer is "
        "judged): agent_b 1" in done.stdout
    )
    assert (
        "runs with no answer yet were left out (paused for a human, whose resumed run "
        "answers, or still going when captured): agent_a 2" in done.stdout
    )
    assert "winner: agent_a" in done.stdout


def test_compare_matches_a_follow_up_by_the_request_before_it(
    judge_server: JudgeServer, tmp_path: Any
) -> None:
    judged: list[tuple[str, str, str]] = []

    def respond(request: dict[str, Any]) -> Reply:
        text = request["messages"][1]["content"]
        shown = [
            text.split(f"<<<DATA {part}\n")[1].split("\nDATA>>>")[0]
            for part in ("input", "answer_A", "answer_B")
        ]
        judged.append((shown[0], shown[1], shown[2]))
        return Reply(json.dumps({"winner": "tie", "reason": "r"}))

    judge_server.responder = respond
    flight, hotel = "Find me a flight to Paris on Friday.", "Find me a hotel in Rome."
    # both agents ran the same two scripted conversations, concurrently: agent_b's sessions
    # went in the other order, so its first "Yes, please." accepts the hotel
    for agent, topics in (("agent_a", ["flight", "hotel"]), ("agent_b", ["hotel", "flight"])):
        with CaptureWriter(tmp_path / f"{agent}.jsonl") as writer:
            for topic in topics:
                request = flight if topic == "flight" else hotel
                offer = f"{agent}: I found a {topic}. Shall I book it?"
                writer.write(Trace(input=request, output=offer, session_id=f"{agent}-{topic}"))
            for topic in topics:
                done = f"{agent}: booked the {topic}."
                writer.write(
                    Trace(input="Yes, please.", output=done, session_id=f"{agent}-{topic}")
                )
    done = _compare(judge_server, tmp_path / "agent_a.jsonl", tmp_path / "agent_b.jsonl")
    assert done.returncode == 0, done.stderr
    # each "Yes, please." is its own request, named by the one before it, and each agent's
    # booking of the same thing is judged against the other's (both orders)
    follow_ups = sorted(
        (shown, sorted([a, b])) for shown, a, b in judged if shown.endswith("Yes, please.")
    )
    assert follow_ups == [
        (f"Earlier in the conversation the user asked: {request}\nThen: Yes, please.", pair)
        for request, pair in sorted(
            [
                (flight, ["agent_a: booked the flight.", "agent_b: booked the flight."]),
                (hotel, ["agent_a: booked the hotel.", "agent_b: booked the hotel."]),
            ]
            * 2
        )
    ]
    assert "4 shared requests" in done.stdout and "asked a request again" not in done.stdout


def test_compare_judges_a_run_resumed_after_a_failure_by_its_answer(
    judge_server: JudgeServer, tmp_path: Any
) -> None:
    # agent_a's run failed and was resumed from its checkpoint, and answered well: the
    # failed run's empty answer was judged as agent_a's, a tie with agent_b's poor one, and
    # the resumed run was left out as the request asked again
    judge_server.responder = good_wins
    failed = Trace(id="f1", input="q1", session_id="s", status=RunStatus.ERROR, error="down")
    resumed = Trace(
        input="q1", output="good 1", session_id="s", metadata={"resumes_trace_id": "f1"}
    )
    again = Trace(input="q1", output="poor again", session_id="s")  # asked again: left out
    with CaptureWriter(tmp_path / "agent_a.jsonl") as writer:
        for trace in (failed, resumed, again):
            writer.write(trace)
    _capture(tmp_path / "agent_b.jsonl", [("q1", "poor 1")])
    done = _compare(judge_server, tmp_path / "agent_a.jsonl", tmp_path / "agent_b.jsonl")
    assert done.returncode == 0, done.stderr
    assert win_rates(done.stdout) == [
        ["agent_a", "1.000", "1", "0"],
        ["agent_b", "0.000", "0", "0"],
    ]
    assert (
        "runs that asked a request again were left out (each request's first answer is "
        "judged): agent_a 1" in done.stdout
    )


def test_compare_needs_a_judge_and_shared_requests(tmp_path: Any) -> None:
    _capture(tmp_path / "a.jsonl", [("q1", "x")])
    _capture(tmp_path / "b.jsonl", [("q2", "y")])
    base = [sys.executable, "-m", "agenteval_core.cli", "compare"]
    no_judge = subprocess.run(
        [*base, str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")],
        capture_output=True,
        text=True,
    )
    assert (no_judge.returncode, no_judge.stderr.strip()) == (
        2,
        "agenteval: error: compare needs a judge: pass --judge-model (and --judge-base-url)",
    )
    one = subprocess.run(
        [*base, str(tmp_path / "a.jsonl"), "--judge-model", "m"], capture_output=True, text=True
    )
    assert (one.returncode, one.stderr.strip()) == (
        2,
        "agenteval: error: compare needs the captures of at least two agents",
    )
    unshared = subprocess.run(
        [*base, str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--judge-model", "m"],
        capture_output=True,
        text=True,
    )
    assert unshared.returncode == 2
    assert "the captures share no request" in unshared.stderr
