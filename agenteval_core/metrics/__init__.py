"""The built-in metrics. Importing this package registers every one of them."""

from __future__ import annotations

from ._agentic import Agentic
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
from ._session import (
    AgentConsistency,
    AgentReliability,
    IncrementalSession,
    agent_consistency,
    agent_reliability,
)

__all__ = [
    "AgentConsistency",
    "AgentReliability",
    "Agentic",
    "Coherence",
    "EndState",
    "IncrementalSession",
    "LoopDetection",
    "ParameterCorrectness",
    "PlanOrder",
    "ReferenceToolCorrectness",
    "StepRatio",
    "ToolCallAccuracy",
    "ToolRoutingAccuracy",
    "ToolSelectionF1",
    "agent_consistency",
    "agent_reliability",
]
