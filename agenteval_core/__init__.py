"""agenteval: evaluate AI agents live and offline.

The public API is re-exported here; modules whose names start with an underscore are private.
"""

from __future__ import annotations

from ._embedder import Embedder, HashingEmbedder, default_embedder
from ._errors import (
    AgentEvalError,
    CaptureError,
    CaptureFormatError,
    JudgeError,
    JudgeParseError,
    JudgeUnavailableError,
    MetricInputError,
    SchemaVersionError,
    UnknownMetricError,
)
from ._http_embedder import HTTPEmbedder
from ._metric import (
    Metric,
    MetricInfo,
    MetricKind,
    Score,
    SessionMetric,
    create_metric,
    list_metrics,
    metric_class,
    register_metric,
)
from ._redact import Redactor
from ._results import MetricResult
from ._schema import (
    SCHEMA_VERSION,
    AgentStep,
    EvalCase,
    ExpectedToolCall,
    Session,
    Span,
    SpanKind,
    ToolCall,
    ToolSpec,
    Trace,
)
from ._st_embedder import SentenceTransformerEmbedder
from ._statistics import PassKEstimate, estimate_pass_k, pass_at_k, pass_pow_k
from ._suite import CaseReport, EvalSuite, RunResult, SuiteReport
from .metrics import agent_consistency, agent_reliability
from .metrics._best_of import BestOfResult, abest_of, best_of

__version__ = "0.1.0"

__all__ = [
    "SCHEMA_VERSION",
    "AgentEvalError",
    "AgentStep",
    "BestOfResult",
    "CaptureError",
    "CaptureFormatError",
    "CaseReport",
    "Embedder",
    "EvalCase",
    "EvalSuite",
    "ExpectedToolCall",
    "HTTPEmbedder",
    "HashingEmbedder",
    "JudgeError",
    "JudgeParseError",
    "JudgeUnavailableError",
    "Metric",
    "MetricInfo",
    "MetricInputError",
    "MetricKind",
    "MetricResult",
    "PassKEstimate",
    "Redactor",
    "RunResult",
    "SchemaVersionError",
    "Score",
    "SentenceTransformerEmbedder",
    "Session",
    "SessionMetric",
    "Span",
    "SpanKind",
    "SuiteReport",
    "ToolCall",
    "ToolSpec",
    "Trace",
    "UnknownMetricError",
    "__version__",
    "abest_of",
    "agent_consistency",
    "agent_reliability",
    "best_of",
    "create_metric",
    "default_embedder",
    "estimate_pass_k",
    "list_metrics",
    "metric_class",
    "pass_at_k",
    "pass_pow_k",
    "register_metric",
]
