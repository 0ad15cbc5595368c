"""Captures whose sessions take turns, and what a replay's results file says of their
sessions: what the tests of the open-sessions limit share (one process, workers, Ray)."""

from __future__ import annotations

import json
from pathlib import Path

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
