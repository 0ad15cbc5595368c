"""What the framework tests share: the `evaluator` fixture, an online evaluator that captures
to a temporary file (a test module may define its own),
and the traces it captured once everything recorded so far is handled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agenteval_core import OnlineEvaluator, Trace, read_capture


@pytest.fixture
def evaluator(tmp_path: Path) -> Iterator[OnlineEvaluator]:
    evaluator = OnlineEvaluator(capture=tmp_path / "capture.jsonl", log=False)
    yield evaluator
    evaluator.close()


def captured_traces(evaluator: OnlineEvaluator) -> list[Trace]:
    assert evaluator.flush(20)
    assert evaluator.capture_path is not None
    return list(read_capture(evaluator.capture_path))
