"""Captures whose sessions take turns or whose lines were shipped twice, and what a replay's
results file says of them: what the tests of one process, workers and Ray share."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agenteval_core import EvalCase, Metric, MetricKind, Score, Trace, register_metric


def sessions_taking_turns(path: Path, turns: int, names: str = "ab") -> Path:
    """A capture of one session per letter of ``names``, taking turns (a0, b0, a1, b1, ...),
    ``turns`` traces each."""
    traces = [
        Trace(id=f"{name}{turn}", input=f"question {turn}", output="ok", session_id=name)
        for turn in range(turns)
        for name in names
    ]
    path.write_text("".join(trace.model_dump_json() + "\n" for trace in traces))
    return path


def session_parts(results: Path) -> list[tuple[str, int]]:
    """Each session line of a results file (or of a directory of results shards) as its
    session and the traces its first session metric counted, sorted."""
    files = sorted(results.glob("*.jsonl")) if results.is_dir() else [results]
    return sorted(
        (line["session_id"], line["session_results"][0]["metadata"]["total_traces_in_session"])
        for file in files
        for line in map(json.loads, file.read_text().splitlines())
        if "session_results" in line
    )


ANSWERS = (
    "Your parcel left the warehouse on Monday.",
    "The refund of 15 euros was issued to your card.",
    "Support is open from nine to five on weekdays.",
)


def shipped_twice(tmp_path: Path) -> tuple[Path, Path]:
    """A session of three turns as captured, and the same lines as a log shipper that
    delivers at least once wrote them (t1 again after itself, t0 again at the end)."""
    lines = [
        Trace(id=f"t{i}", input=f"question {i}", output=answer, session_id="s").model_dump_json()
        for i, answer in enumerate(ANSWERS)
    ]
    once, twice = tmp_path / "once.jsonl", tmp_path / "twice.jsonl"
    once.write_text("".join(f"{line}\n" for line in lines))
    twice.write_text("".join(f"{lines[i]}\n" for i in (0, 1, 1, 2, 0)))
    return once, twice


def results_without_timings(path: Path) -> list[dict[str, Any]]:
    """A results file's lines, in order, without the one thing allowed to differ."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        for result in line.get("results", []) + line.get("session_results", []):
            result.pop("latency_ms")
    return lines


@pytest.fixture
def callers_metric(monkeypatch: pytest.MonkeyPatch) -> type[Metric]:
    """A metric registered inside a function, as a script's or a notebook's is (no worker
    process can import its class): ``answer_words``, the answer's words over 10, at most 1.
    The registry is as it was after the test."""
    from agenteval_core.metrics import _registry

    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))

    @register_metric
    class AnswerWords(Metric):
        name = "answer_words"
        kind = MetricKind.DETERMINISTIC

        def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
            return Score(min(1.0, len(str(case.actual_output).split()) / 10), "words")

    return AnswerWords


def four_calls_budget(base_url: str) -> Any:
    """A judge at ``base_url`` whose budget allows four calls, one at a time: a call is 100
    prompt tokens at $1,000 a million, $0.10, and $0.40 reaches the $0.35 budget."""
    from agenteval_core.judges import OpenAIJudge

    return OpenAIJudge(
        "judge-model",
        base_url=base_url,
        cache=None,
        max_concurrency=1,
        prices={"judge-model": (1000.0, 0.0)},
        budget_usd=0.35,
    )


def assert_the_budget_held_for_two(report: Any, asked: int, traces: int) -> None:
    """Two processes (or scorers) shared the budget of :func:`four_calls_budget`: four calls,
    and one more the other had started as the fourth was paid for; every result past them
    says the budget ran out. Each with the whole budget made eight."""
    assert 4 <= asked <= 5
    confidence = report.summary.metrics["confidence"]
    assert (confidence.scored, confidence.errors) == (asked, traces - asked)
    assert confidence.error_kinds == {"budget": traces - asked}


def twenty_a_second(base_url: str) -> Any:
    """An HTTP embedder at ``base_url`` limited to 20 requests a second, each text its own
    request."""
    from agenteval_core import HTTPEmbedder

    return HTTPEmbedder(
        "emb-model", base_url=base_url, batch_size=1, requests_per_period=20, period=1.0, cache=None
    )


def assert_one_limit_spaced(arrivals: list[float], requests: int) -> None:
    """``requests`` embeddings requests went through one limit of 20 a second: the last
    about ``(requests - 1) / 20`` s after the first (two processes each at their own limit
    sent 24 within 0.1 s). A quarter second is allowed for the first request: each request
    waits for its slot once the shared limiter's answer is back, so a slow first answer
    shortens the span (under load, 24 arrivals once spanned 1.08 s, not 1.15)."""
    arrived = sorted(arrivals)
    assert len(arrived) == requests and arrived[-1] - arrived[0] >= (requests - 1) / 20 - 0.25
