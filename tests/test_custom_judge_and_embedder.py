"""A judge or an embedder of the user's works with every metric that takes one."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest
from pydantic import BaseModel

from agenteval_core import AgentStep, MetricKind, ToolCall, Trace, create_metric, list_metrics
from agenteval_core.judges import BaseJudge, Completion


class MinimalJudge(BaseJudge):
    """The least a judge of the user's writes: a model name and ``_complete``."""

    def __init__(self) -> None:
        super().__init__(cache=None)
        self.asked: list[str] = []

    @property
    def model(self) -> str:
        return "my-model"

    async def _complete(
        self, messages: list[dict[str, str]], schema: type[BaseModel]
    ) -> Completion:
        self.asked.append(schema.__name__)
        return Completion(text=json.dumps(_answer(schema)))


def _answer(schema: type[BaseModel]) -> object:
    """A valid answer for any reply schema: each field filled with a plain value."""
    answer: dict[str, object] = {}
    for name, field in schema.model_fields.items():
        kind = str(field.annotation)
        if "list" in kind:
            answer[name] = []
        elif "float" in kind or "int" in kind:
            answer[name] = 1
        elif "bool" in kind:
            answer[name] = True
        else:
            answer[name] = "fine"
    return answer


def _trace() -> Trace:
    return Trace.from_steps(
        "Refund order 42",
        [
            AgentStep(tool_calls=[ToolCall(name="refund", arguments={"order": 42}, result="ok")]),
            AgentStep(output="Order 42 is refunded."),
        ],
    )


JUDGE_METRICS = sorted(info.name for info in list_metrics() if info.kind is MetricKind.JUDGE)


@pytest.mark.parametrize("name", JUDGE_METRICS)
def test_a_minimal_judge_subclass_works_with_every_judge_metric(name: str) -> None:
    judge = MinimalJudge()
    result = create_metric(name, judge=judge).measure(_trace())
    assert "AttributeError" not in (result.error or "")  # was: AttributeError: _shared
    assert result.error is None or not result.error.startswith("judge error"), result.error
    # the judge was asked, or the metric says what the trace lacks (an expected answer, ...)
    assert judge.asked or (result.status == "skipped" and result.reason), result


class UnnormalisedEmbedder:
    """Returns raw vectors of norm 2 (most embedding APIs normalise; some do not)."""

    name = "raw"

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        return np.array([[2.0, 0.0] if t.startswith("Refund") else [2.0, 2.0] for t in texts])

    async def aembed(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        return self.embed(texts)


def test_an_unnormalised_embedder_gets_a_cosine_not_a_dot_product() -> None:
    result = create_metric("coherence", embedder=UnnormalisedEmbedder()).measure(_trace())
    # input (2, 0) and output (2, 2): cosine 1/sqrt(2) = 0.7071 (the dot product was 4.0,
    # clipped to 1.0)
    assert result.score == pytest.approx(2**-0.5)
