"""What the framework tests share: the `evaluator` fixture, an online evaluator that captures
to a temporary file (a test module may define its own; `evaluator.captured()` returns its
traces), the traces a CrewAI listener captured, and the regression case a capture gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agenteval_core import OnlineEvaluator, RegressionCase, Trace, cases_from_capture


@pytest.fixture
def evaluator(tmp_path: Path) -> Iterator[OnlineEvaluator]:
    evaluator = OnlineEvaluator(capture=tmp_path / "capture.jsonl", log=False)
    yield evaluator
    evaluator.close()


def captured_by(listener: Any) -> list[Trace]:
    """What a CrewAI listener's evaluator captured, once CrewAI has delivered its events
    (its event bus runs handlers on a loop of its own)."""
    assert listener.flush(20)
    return list(listener.evaluator.captured())


def regression_case(evaluator: OnlineEvaluator) -> RegressionCase:
    """The one regression case the evaluator's capture gives (its runs scored by
    ``tool_failures``), as ``agenteval cases`` writes it."""
    assert evaluator.flush(20) and evaluator.capture_path is not None
    [case] = cases_from_capture(evaluator.capture_path, metrics=["tool_failures"])
    return case
