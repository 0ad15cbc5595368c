"""The built-in metrics. Importing this package registers every one of them."""

from __future__ import annotations

from ._deterministic import (
    EndState,
    ParameterCorrectness,
    PlanOrder,
    ReferenceToolCorrectness,
    StepRatio,
    ToolCallAccuracy,
    ToolRoutingAccuracy,
    ToolSelectionF1,
)
from ._embedding import Coherence, LoopDetection

__all__ = [
    "Coherence",
    "EndState",
    "LoopDetection",
    "ParameterCorrectness",
    "PlanOrder",
    "ReferenceToolCorrectness",
    "StepRatio",
    "ToolCallAccuracy",
    "ToolRoutingAccuracy",
    "ToolSelectionF1",
]
