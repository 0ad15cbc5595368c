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

__all__ = [
    "EndState",
    "ParameterCorrectness",
    "PlanOrder",
    "ReferenceToolCorrectness",
    "StepRatio",
    "ToolCallAccuracy",
    "ToolRoutingAccuracy",
    "ToolSelectionF1",
]
