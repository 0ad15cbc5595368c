"""Gaussia's BestOf: a tournament that compares several agents' answers to the same inputs."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from .._errors import MetricInputError
from .._sync import run_sync
from ..judges._protocol import Judge, JudgeRequest
from ._judge_base import Prompt

__all__ = ["BestOfResult", "PairwiseVerdict", "abest_of", "best_of"]

COMPARE = Prompt(
    "compare",
    "Two answers, A and B, were given to the same input. Decide which answers it better: more "
    "correct, complete and useful. Say 'tie' when neither is better. "
    'Reply as {"winner": "A"|"B"|"tie", "reason": "..."}.',
)
PROMPT_VERSION = hashlib.sha256(COMPARE.instructions.encode()).hexdigest()[:12]


class Preference(BaseModel):
    winner: Literal["A", "B", "tie"]
    reason: str


class PairwiseVerdict(BaseModel):
    """One pair of agents on one input, judged in both orders."""

    input_index: int
    first: str
    second: str
    winner: str | None
    """The agent preferred in both orders; ``None`` when the orders disagree or say tie."""
    reasons: list[str]


class BestOfResult(BaseModel):
    """Win rates of every agent; ``winner`` is ``None`` when agents tie for first (``tied``)."""

    agents: list[str]
    comparisons: list[PairwiseVerdict]
    wins: dict[str, int]
    ties: dict[str, int]
    win_rates: dict[str, float] = Field(description="(wins + ties / 2) / comparisons taken part in")
    winner: str | None
    tied: list[str]
    judge_model: str
    prompt_version: str = PROMPT_VERSION


async def _compare(
    judge: Judge, index: int, question: str, a: tuple[str, str], b: tuple[str, str]
) -> PairwiseVerdict:
    def ask(first: tuple[str, str], second: tuple[str, str]) -> JudgeRequest[Preference]:
        return JudgeRequest(
            metric="best_of",
            prompt_version=PROMPT_VERSION,
            messages=COMPARE.messages(input=question, answer_A=first[1], answer_B=second[1]),
            schema=Preference,
            stage="compare",
        )

    # Ask in both orders: a judge that prefers a position cannot decide the outcome.
    forward, backward = await asyncio.gather(judge.judge(ask(a, b)), judge.judge(ask(b, a)))
    picks = {
        {"A": a[0], "B": b[0]}.get(forward.parsed.winner),
        {"A": b[0], "B": a[0]}.get(backward.parsed.winner),
    }
    winner = picks.pop() if len(picks) == 1 else None
    return PairwiseVerdict(
        input_index=index,
        first=a[0],
        second=b[0],
        winner=winner,
        reasons=[forward.parsed.reason, backward.parsed.reason],
    )


async def abest_of(
    inputs: Sequence[str], answers: Mapping[str, Sequence[str]], judge: Judge
) -> BestOfResult:
    """Compare every pair of agents on every input (both orders), tally win rates."""
    agents = list(answers)
    if len(agents) < 2:
        raise MetricInputError("best_of needs answers from at least two agents")
    for agent, given in answers.items():
        if len(given) != len(inputs):
            raise MetricInputError(
                f"agent {agent!r} has {len(given)} answers for {len(inputs)} inputs"
            )
    verdicts = await asyncio.gather(
        *(
            _compare(judge, i, question, (a, answers[a][i]), (b, answers[b][i]))
            for i, question in enumerate(inputs)
            for a, b in itertools.combinations(agents, 2)
        )
    )
    wins = dict.fromkeys(agents, 0)
    ties = dict.fromkeys(agents, 0)
    played = dict.fromkeys(agents, 0)
    for verdict in verdicts:
        for agent in (verdict.first, verdict.second):
            played[agent] += 1
        if verdict.winner is None:
            ties[verdict.first] += 1
            ties[verdict.second] += 1
        else:
            wins[verdict.winner] += 1
    rates = {agent: (wins[agent] + ties[agent] / 2) / played[agent] for agent in agents}
    best = max(rates.values())
    tied = [agent for agent in agents if abs(rates[agent] - best) < 1e-12]
    return BestOfResult(
        agents=agents,
        comparisons=list(verdicts),
        wins=wins,
        ties=ties,
        win_rates=rates,
        winner=tied[0] if len(tied) == 1 else None,
        tied=tied if len(tied) > 1 else [],
        judge_model=judge.model,
    )


def best_of(
    inputs: Sequence[str], answers: Mapping[str, Sequence[str]], judge: Judge
) -> BestOfResult:
    """Blocking form of :func:`abest_of`."""
    return run_sync(abest_of(inputs, answers, judge))
