"""agenteval and OpenTelemetry: export traces and scores to any OTLP backend (Arize Phoenix,
Langfuse, Jaeger, a collector), and import spans written by OpenInference or GenAI-convention
instrumentors as traces.

    from agenteval_otel import OTelSink, import_otlp

    sink = OTelSink(phoenix="http://127.0.0.1:6006")      # spans + scores as annotations
    traces = import_otlp("spans.jsonl")                    # OTLP JSON or JSON Lines
"""

from __future__ import annotations

try:
    import opentelemetry.sdk  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "agenteval_otel needs OpenTelemetry: pip install 'agenteval[otel]' (from a checkout: pip install -e '.[otel]')"
    ) from exc

from ._conventions import otel_ids
from ._export import ExportedTrace, ExportError, OTelExporter, OTelSink
from ._import import import_otlp, import_otlp_json, iter_otlp
from ._otlp import otlp_json
from ._phoenix import PhoenixAnnotations

__all__ = [
    "ExportError",
    "ExportedTrace",
    "OTelExporter",
    "OTelSink",
    "PhoenixAnnotations",
    "import_otlp",
    "import_otlp_json",
    "iter_otlp",
    "otel_ids",
    "otlp_json",
]
