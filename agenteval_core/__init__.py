"""agenteval: evaluate AI agents live and offline.

The public API is re-exported here; modules whose names start with an underscore are private.
"""

from __future__ import annotations

from ._capture import CaptureWriter, read_capture
from ._embedder import Embedder, HashingEmbedder, default_embedder
from ._engine import (
    DEFAULT_SESSION_METRICS,
    Engine,
    SessionHistory,
    TraceResults,
    default_metric_names,
    default_trace_metric_names,
    resolve_metrics,
)
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
from ._loops import LoopGuard, canonical_call
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
from ._online import DEFAULT_REDACTOR, EvaluatorStats, OnlineEvaluator, default_evaluator
from ._recorder import UNSET, EventPump, Recorder, RunRoots, TraceAssembler
from ._redact import Redactor
from ._replay import ReplayReport, areplay, replay
from ._results import MetricResult
from ._schema import (
    COMPLETED_STATUSES,
    GUARD_REFUSED,
    OTEL_OPERATION_NAMES,
    SCHEMA_VERSION,
    AgentStep,
    EvalCase,
    ExpectedToolCall,
    LoopAlert,
    RunStatus,
    Session,
    Span,
    SpanKind,
    ToolCall,
    ToolSpec,
    Trace,
)
from ._scoring import MetricSummary, ResultSummary
from ._sinks import CallbackSink, ConsoleSink, LoggingSink, ResultsFileSink, Sink
from ._st_embedder import SentenceTransformerEmbedder
from ._statistics import PassKEstimate, estimate_pass_k, pass_at_k, pass_pow_k
from ._suite import CaseReport, EvalSuite, RunResult, SuiteReport
from .judges import Judge, OpenAIJudge
from .metrics import agent_consistency, agent_reliability
from .metrics._best_of import BestOfResult, abest_of, best_of

__version__ = "0.1.0"

__all__ = [
    "COMPLETED_STATUSES",
    "DEFAULT_REDACTOR",
    "DEFAULT_SESSION_METRICS",
    "GUARD_REFUSED",
    "OTEL_OPERATION_NAMES",
    "SCHEMA_VERSION",
    "UNSET",
    "AgentEvalError",
    "AgentStep",
    "BestOfResult",
    "CallbackSink",
    "CaptureError",
    "CaptureFormatError",
    "CaptureWriter",
    "CaseReport",
    "ConsoleSink",
    "Embedder",
    "Engine",
    "EvalCase",
    "EvalSuite",
    "EvaluatorStats",
    "EventPump",
    "ExpectedToolCall",
    "HTTPEmbedder",
    "HashingEmbedder",
    "Judge",
    "JudgeError",
    "JudgeParseError",
    "JudgeUnavailableError",
    "LoggingSink",
    "LoopAlert",
    "LoopGuard",
    "Metric",
    "MetricInfo",
    "MetricInputError",
    "MetricKind",
    "MetricResult",
    "MetricSummary",
    "OnlineEvaluator",
    "OpenAIJudge",
    "PassKEstimate",
    "Recorder",
    "Redactor",
    "ReplayReport",
    "ResultSummary",
    "ResultsFileSink",
    "RunResult",
    "RunRoots",
    "RunStatus",
    "SchemaVersionError",
    "Score",
    "SentenceTransformerEmbedder",
    "Session",
    "SessionHistory",
    "SessionMetric",
    "Sink",
    "Span",
    "SpanKind",
    "SuiteReport",
    "ToolCall",
    "ToolSpec",
    "Trace",
    "TraceAssembler",
    "TraceResults",
    "UnknownMetricError",
    "__version__",
    "abest_of",
    "agent_consistency",
    "agent_reliability",
    "areplay",
    "best_of",
    "canonical_call",
    "create_metric",
    "default_embedder",
    "default_evaluator",
    "default_metric_names",
    "default_trace_metric_names",
    "estimate_pass_k",
    "list_metrics",
    "metric_class",
    "pass_at_k",
    "pass_pow_k",
    "read_capture",
    "register_metric",
    "replay",
    "resolve_metrics",
]
