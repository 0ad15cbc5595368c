"""agenteval: evaluate AI agents live and offline.

The public API is re-exported here; modules whose names start with an underscore are private.
Adapter authors find what a framework adapter records with in :mod:`agenteval_core.recording`.
Names load on first use, so ``import agenteval_core`` takes milliseconds and each name brings
in only what it needs (the trace schema needs pydantic, not NumPy, httpx or the metrics).
"""

# The imports below are for type checkers only; _EXPORTS is what loads each name at run time.
# ruff: noqa: F401

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._lazy import load_export

if TYPE_CHECKING:
    from ._errors import (
        AgentEvalError,
        CaptureError,
        CaptureFormatError,
        ClusterUnreachableError,
        ErrorKind,
        JudgeBudgetError,
        JudgeConfigError,
        JudgeContextOverflowError,
        JudgeError,
        JudgeInvalidAnswerError,
        JudgeParseError,
        JudgeUnavailableError,
        JudgeUnsupportedRequestError,
        JudgeUsage,
        MetricInputError,
        ResultsWriteError,
        SchemaVersionError,
        UnknownMetricError,
    )
    from ._redact import Redactor, configure_redaction
    from .calibration._calibrate import (
        CalibrationLabel,
        CalibrationReport,
        MetricCalibration,
        calibrate,
        read_labels,
    )
    from .embedders._hashing import Embedder, HashingEmbedder
    from .embedders._http import HTTPEmbedder
    from .embedders._sentence_transformers import SentenceTransformerEmbedder
    from .embedders._static import StaticEmbedder, default_embedder
    from .engine._engine import (
        DEFAULT_SESSION_METRICS,
        Engine,
        default_metric_names,
        default_trace_metric_names,
        resolve_metrics,
    )
    from .engine._history import SessionHistory
    from .engine._sinks import CallbackSink, ConsoleSink, LoggingSink, ResultsFileSink, Sink
    from .engine._summary import MetricSummary, ResultSummary
    from .judges import Judge, OpenAIJudge
    from .metrics import agent_consistency, agent_reliability
    from .metrics._best_of import BestOfResult, abest_of, best_of
    from .metrics._loops import LoopGuard, canonical_call
    from .metrics._protocol import Metric, MetricKind, Score, SessionMetric
    from .metrics._registry import (
        MetricInfo,
        create_metric,
        list_metrics,
        metric_class,
        register_metric,
    )
    from .metrics._statistics import (
        MeanPassK,
        PassKEstimate,
        best_pass_k,
        estimate_pass_k,
        mean_pass_k,
        pass_at_k,
        pass_pow_k,
    )
    from .offline._processes import replay
    from .offline._replay import ProcessTimes, ReplayOptions, ReplayReport, areplay
    from .online._context import current_session, session
    from .online._evaluator import (
        DEFAULT_REDACTOR,
        EvaluatorStats,
        OnlineEvaluator,
        default_evaluator,
    )
    from .report._report import write_report
    from .schema._capture import (
        CaptureWriter,
        line_shard,
        read_capture,
        refuse_compressed,
        shard_capture,
    )
    from .schema._results import RESULTS_VERSION, MetricResult, ResultsLine, TraceResults
    from .schema._trace import (
        AGENT_NAME,
        COMPLETED_STATUSES,
        CONTROL_FLOW,
        GRAPH_STEP,
        GUARD_REFUSED,
        HANDOFF_TARGET,
        INCOMPLETE_STATUSES,
        INTERNAL_CALL,
        OTEL_OPERATION_NAMES,
        PROVIDER_TOOL,
        REASONING,
        REFUSAL,
        SCHEMA_VERSION,
        STEPS_UNRECORDED,
        TOOL_NOT_RUN,
        AgentStep,
        EvalCase,
        ExpectedToolCall,
        LoopAlert,
        RunStatus,
        Span,
        SpanKind,
        ToolCall,
        ToolCallLimit,
        ToolSpec,
        Trace,
        answers_by_question,
        text_of,
    )
    from .schema._values import plain
    from .suite._baseline import (
        BaselineComparison,
        CaseComparison,
        compare_to_baseline,
        drop_probability,
        unflaggable_baseline,
    )
    from .suite._cases import (
        CaseProvenance,
        FailedMetric,
        RegressionCase,
        cases_from_capture,
        read_cases,
        write_cases,
    )
    from .suite._suite import (
        AttemptOutcome,
        CaseReport,
        EvalSuite,
        RunOptions,
        RunResult,
        SuiteReport,
    )

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "CaptureWriter": ".schema._capture",
    "read_capture": ".schema._capture",
    "line_shard": ".schema._capture",
    "shard_capture": ".schema._capture",
    "refuse_compressed": ".schema._capture",
    "plain": ".schema._values",
    "Embedder": ".embedders._hashing",
    "HashingEmbedder": ".embedders._hashing",
    "StaticEmbedder": ".embedders._static",
    "default_embedder": ".embedders._static",
    "DEFAULT_SESSION_METRICS": ".engine._engine",
    "Engine": ".engine._engine",
    "SessionHistory": ".engine._history",
    "TraceResults": ".schema._results",
    "ResultsLine": ".schema._results",
    "RESULTS_VERSION": ".schema._results",
    "default_metric_names": ".engine._engine",
    "default_trace_metric_names": ".engine._engine",
    "resolve_metrics": ".engine._engine",
    "AgentEvalError": "._errors",
    "ErrorKind": "._errors",
    "CaptureError": "._errors",
    "CaptureFormatError": "._errors",
    "ClusterUnreachableError": "._errors",
    "JudgeConfigError": "._errors",
    "JudgeError": "._errors",
    "JudgeParseError": "._errors",
    "JudgeUnavailableError": "._errors",
    "JudgeBudgetError": "._errors",
    "JudgeContextOverflowError": "._errors",
    "JudgeInvalidAnswerError": "._errors",
    "JudgeUnsupportedRequestError": "._errors",
    "JudgeUsage": "._errors",
    "MetricInputError": "._errors",
    "ResultsWriteError": "._errors",
    "SchemaVersionError": "._errors",
    "UnknownMetricError": "._errors",
    "HTTPEmbedder": ".embedders._http",
    "LoopGuard": ".metrics._loops",
    "canonical_call": ".metrics._loops",
    "Metric": ".metrics._protocol",
    "MetricInfo": ".metrics._registry",
    "MetricKind": ".metrics._protocol",
    "Score": ".metrics._protocol",
    "SessionMetric": ".metrics._protocol",
    "create_metric": ".metrics._registry",
    "list_metrics": ".metrics._registry",
    "metric_class": ".metrics._registry",
    "register_metric": ".metrics._registry",
    "DEFAULT_REDACTOR": ".online._evaluator",
    "EvaluatorStats": ".online._evaluator",
    "OnlineEvaluator": ".online._evaluator",
    "default_evaluator": ".online._evaluator",
    "current_session": ".online._context",
    "session": ".online._context",
    "Redactor": "._redact",
    "CalibrationLabel": ".calibration._calibrate",
    "CalibrationReport": ".calibration._calibrate",
    "MetricCalibration": ".calibration._calibrate",
    "calibrate": ".calibration._calibrate",
    "read_labels": ".calibration._calibrate",
    "configure_redaction": "._redact",
    "ProcessTimes": ".offline._replay",
    "ReplayReport": ".offline._replay",
    "ReplayOptions": ".offline._replay",
    "areplay": ".offline._replay",
    "replay": ".offline._processes",
    "write_report": ".report._report",
    "MetricResult": ".schema._results",
    "AgentStep": ".schema._trace",
    "COMPLETED_STATUSES": ".schema._trace",
    "EvalCase": ".schema._trace",
    "ExpectedToolCall": ".schema._trace",
    "GRAPH_STEP": ".schema._trace",
    "GUARD_REFUSED": ".schema._trace",
    "CONTROL_FLOW": ".schema._trace",
    "AGENT_NAME": ".schema._trace",
    "HANDOFF_TARGET": ".schema._trace",
    "INCOMPLETE_STATUSES": ".schema._trace",
    "INTERNAL_CALL": ".schema._trace",
    "PROVIDER_TOOL": ".schema._trace",
    "REASONING": ".schema._trace",
    "REFUSAL": ".schema._trace",
    "LoopAlert": ".schema._trace",
    "OTEL_OPERATION_NAMES": ".schema._trace",
    "RunStatus": ".schema._trace",
    "SCHEMA_VERSION": ".schema._trace",
    "STEPS_UNRECORDED": ".schema._trace",
    "TOOL_NOT_RUN": ".schema._trace",
    "Span": ".schema._trace",
    "SpanKind": ".schema._trace",
    "ToolCall": ".schema._trace",
    "ToolCallLimit": ".schema._trace",
    "ToolSpec": ".schema._trace",
    "Trace": ".schema._trace",
    "text_of": ".schema._trace",
    "answers_by_question": ".schema._trace",
    "MetricSummary": ".engine._summary",
    "ResultSummary": ".engine._summary",
    "CallbackSink": ".engine._sinks",
    "ConsoleSink": ".engine._sinks",
    "LoggingSink": ".engine._sinks",
    "ResultsFileSink": ".engine._sinks",
    "Sink": ".engine._sinks",
    "SentenceTransformerEmbedder": ".embedders._sentence_transformers",
    "MeanPassK": ".metrics._statistics",
    "PassKEstimate": ".metrics._statistics",
    "mean_pass_k": ".metrics._statistics",
    "estimate_pass_k": ".metrics._statistics",
    "best_pass_k": ".metrics._statistics",
    "pass_at_k": ".metrics._statistics",
    "pass_pow_k": ".metrics._statistics",
    "AttemptOutcome": ".suite._suite",
    "CaseReport": ".suite._suite",
    "BaselineComparison": ".suite._baseline",
    "CaseComparison": ".suite._baseline",
    "compare_to_baseline": ".suite._baseline",
    "drop_probability": ".suite._baseline",
    "unflaggable_baseline": ".suite._baseline",
    "CaseProvenance": ".suite._cases",
    "FailedMetric": ".suite._cases",
    "RegressionCase": ".suite._cases",
    "cases_from_capture": ".suite._cases",
    "read_cases": ".suite._cases",
    "write_cases": ".suite._cases",
    "EvalSuite": ".suite._suite",
    "RunResult": ".suite._suite",
    "SuiteReport": ".suite._suite",
    "RunOptions": ".suite._suite",
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
    return load_export(__name__, _EXPORTS, name, globals())


def __dir__() -> list[str]:
    return __all__
