"""Captures whose sessions take turns or whose lines were shipped twice, and what a replay's
results file says of them: what the tests of one process, workers and Ray share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agenteval_core import Trace


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
