"""The metric protocol, the one registry, the statistics, and the built-in metrics.

Importing this package registers every built-in metric."""

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
from ._judge_base import JudgeMetric, Prompt
from ._judge_metrics import (
    AgentMemory,
    AnswerCorrectness,
    ArgumentCorrectness,
    Confidence,
    PlanAdherence,
    PlanQuality,
    StepEfficiency,
    StepFaithfulness,
    TaskCompletion,
    ToolArgumentAccuracy,
    ToolCallNecessity,
    ToolCorrectness,
    TrajectoryEfficiency,
    TrajectoryJudge,
)
from ._loops import ToolCallLoops
from ._session import (
    AgentConsistency,
    AgentReliability,
    IncrementalSession,
    agent_consistency,
    agent_reliability,
)
from ._tool_failures import ToolFailures
from ._trajectory import ToolConstraints, TrajectoryMatch

__all__ = [
    "AgentConsistency",
    "AgentMemory",
    "AgentReliability",
    "Agentic",
    "AnswerCorrectness",
    "ArgumentCorrectness",
    "Coherence",
    "Confidence",
    "EndState",
    "IncrementalSession",
    "JudgeMetric",
    "LoopDetection",
    "ParameterCorrectness",
    "PlanAdherence",
    "PlanOrder",
    "PlanQuality",
    "Prompt",
    "ReferenceToolCorrectness",
    "StepEfficiency",
    "StepFaithfulness",
    "StepRatio",
    "TaskCompletion",
    "ToolArgumentAccuracy",
    "ToolCallAccuracy",
    "ToolCallLoops",
    "ToolCallNecessity",
    "ToolConstraints",
    "ToolCorrectness",
    "ToolFailures",
    "ToolRoutingAccuracy",
    "ToolSelectionF1",
    "TrajectoryEfficiency",
    "TrajectoryJudge",
    "TrajectoryMatch",
    "agent_consistency",
    "agent_reliability",
]
