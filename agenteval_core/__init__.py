"""agenteval: evaluate AI agents live and offline.

The public API is re-exported here; modules whose names start with an underscore are private.
Names load on first use, so ``import agenteval_core`` takes milliseconds and each name brings
in only what it needs (the trace schema needs pydantic, not NumPy, httpx or the metrics).
"""

# The imports below are for type checkers only; _EXPORTS is what loads each name at run time.
# ruff: noqa: F401

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_EXPORTS: dict[str, str] = {
    "CaptureWriter": "._capture",
    "read_capture": "._capture",
    "Embedder": "._embedder",
    "HashingEmbedder": "._embedder",
    "default_embedder": "._embedder",
    "DEFAULT_SESSION_METRICS": "._engine",
    "Engine": "._engine",
    "SessionHistory": "._engine",
    "TraceResults": "._engine",
    "default_metric_names": "._engine",
    "default_trace_metric_names": "._engine",
    "resolve_metrics": "._engine",
    "AgentEvalError": "._errors",
    "CaptureError": "._errors",
    "CaptureFormatError": "._errors",
    "JudgeError": "._errors",
    "JudgeParseError": "._errors",
    "JudgeUnavailableError": "._errors",
    "MetricInputError": "._errors",
    "SchemaVersionError": "._errors",
    "UnknownMetricError": "._errors",
    "HTTPEmbedder": "._http_embedder",
    "LoopGuard": "._loops",
    "canonical_call": "._loops",
    "Metric": "._metric",
    "MetricInfo": "._metric",
    "MetricKind": "._metric",
    "Score": "._metric",
    "SessionMetric": "._metric",
    "create_metric": "._metric",
    "list_metrics": "._metric",
    "metric_class": "._metric",
    "register_metric": "._metric",
    "DEFAULT_REDACTOR": "._online",
    "EvaluatorStats": "._online",
    "OnlineEvaluator": "._online",
    "default_evaluator": "._online",
    "EventPump": "._recorder",
    "Recorder": "._recorder",
    "RunRoots": "._recorder",
    "TraceAssembler": "._recorder",
    "UNSET": "._recorder",
    "Redactor": "._redact",
    "ReplayReport": "._replay",
    "areplay": "._replay",
    "replay": "._replay",
    "MetricResult": "._results",
    "AgentStep": "._schema",
    "COMPLETED_STATUSES": "._schema",
    "EvalCase": "._schema",
    "ExpectedToolCall": "._schema",
    "GUARD_REFUSED": "._schema",
    "LoopAlert": "._schema",
    "OTEL_OPERATION_NAMES": "._schema",
    "RunStatus": "._schema",
    "SCHEMA_VERSION": "._schema",
    "Session": "._schema",
    "Span": "._schema",
    "SpanKind": "._schema",
    "ToolCall": "._schema",
    "ToolSpec": "._schema",
    "Trace": "._schema",
    "MetricSummary": "._scoring",
    "ResultSummary": "._scoring",
    "CallbackSink": "._sinks",
    "ConsoleSink": "._sinks",
    "LoggingSink": "._sinks",
    "ResultsFileSink": "._sinks",
    "Sink": "._sinks",
    "SentenceTransformerEmbedder": "._st_embedder",
    "PassKEstimate": "._statistics",
    "estimate_pass_k": "._statistics",
    "pass_at_k": "._statistics",
    "pass_pow_k": "._statistics",
    "CaseReport": "._suite",
    "EvalSuite": "._suite",
    "RunResult": "._suite",
    "SuiteReport": "._suite",
    "Judge": ".judges",
    "OpenAIJudge": ".judges",
    "agent_consistency": ".metrics",
    "agent_reliability": ".metrics",
    "BestOfResult": ".metrics._best_of",
    "abest_of": ".metrics._best_of",
    "best_of": ".metrics._best_of",
}
"""Each public name and the private module that defines it."""

__all__ = [*sorted(_EXPORTS), "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agenteval_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__
