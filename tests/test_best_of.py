"""best_of: pairwise tournament with positions swapped, against the scripted judge server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from judge_server import JudgeServer, Reply

from agenteval_core import MetricInputError, best_of
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
