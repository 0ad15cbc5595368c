"""The one registry of metrics: built-in metrics register themselves, third-party packages
add theirs through the ``agenteval.metrics`` entry-point group, and every name a user gives
is resolved here."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, TypeVar

from .._errors import MetricInputError, UnknownMetricError
from ._protocol import MetricBase, MetricKind

__all__ = [
    "ENTRY_POINT_GROUP",
    "MetricInfo",
    "create_metric",
    "list_metrics",
    "metric_class",
    "register_metric",
]

logger = logging.getLogger("agenteval")

_M = TypeVar("_M", bound=type[MetricBase])
_REGISTRY: dict[str, type[MetricBase]] = {}
_PLUGINS_LOADED = False
ENTRY_POINT_GROUP = "agenteval.metrics"


@dataclass(frozen=True)
class MetricInfo:
    """What the registry knows of a metric, for listings."""

    name: str
    kind: MetricKind
    version: str
    default_threshold: float
    description: str


def register_metric(cls: _M) -> _M:
    """Class decorator: register a metric under its ``name``. Names are unique."""
    existing = _REGISTRY.get(cls.name)
    if existing is not None and existing.__qualname__ != cls.__qualname__:
        raise ValueError(f"metric name {cls.name!r} is already registered by {existing!r}")
    _REGISTRY[cls.name] = cls
    return cls


def _ensure_loaded() -> None:
    # the built-in metrics registered themselves when this package was imported
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            entry.load()
        except Exception as exc:
            logger.warning("could not load metric plugin %r: %s", entry.name, exc)


def metric_class(name: str) -> type[MetricBase]:
    """The class registered under ``name``; raises ``UnknownMetricError`` listing known names."""
    _ensure_loaded()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownMetricError(name, sorted(_REGISTRY)) from None


def classes_of(metrics: Sequence[Any] | None) -> dict[str, type[MetricBase]]:
    """The class each registry name among ``metrics`` stands for (metric instances are left
    out); raises ``UnknownMetricError`` for a name none stands for. A replay's worker
    registers these before it builds the metrics by name: it has not run the script,
    notebook or function that registered a metric of the caller's own."""
    return {item: metric_class(item) for item in metrics or () if isinstance(item, str)}


def create_metric(name: str, **options: Any) -> Any:
    """Build the metric registered under ``name`` with ``options`` (e.g. ``threshold=0.7``)."""
    cls = metric_class(name)
    try:
        return cls(**options)
    except TypeError as exc:
        raise MetricInputError(f"{name}: {exc}") from exc


def list_metrics() -> list[MetricInfo]:
    """Every registered metric, sorted by kind then name."""
    _ensure_loaded()
    infos = [
        MetricInfo(
            name=cls.name,
            kind=cls.kind,
            version=cls.version,
            default_threshold=cls.default_threshold,
            description=(cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else "",
        )
        for cls in _REGISTRY.values()
    ]
    order = list(MetricKind)
    return sorted(infos, key=lambda info: (order.index(info.kind), info.name))
