"""agenteval and OpenTelemetry: export traces as GenAI spans with scores as evaluation events,
and import traces captured by OpenInference or GenAI-convention instrumentors (OTLP JSON).

    from agenteval_otel import OTelExporter, OTelSink, import_otlp_json
"""

from __future__ import annotations

try:
    import opentelemetry.sdk  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "agenteval_otel needs OpenTelemetry: pip install 'agenteval[otel]' (from a checkout: pip install -e '.[otel]')"
    ) from exc

from ._export import OTelExporter, OTelSink, otlp_json
from ._import import import_otlp_json

__all__ = ["OTelExporter", "OTelSink", "import_otlp_json", "otlp_json"]
