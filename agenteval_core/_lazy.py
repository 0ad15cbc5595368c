"""Public names that load their private module on first use (a package's ``__getattr__``)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["load_export"]


def load_export(
    package: str, exports: Mapping[str, str], name: str, namespace: dict[str, Any]
) -> Any:
    """The value of ``package``'s public ``name``, imported from the module ``exports`` gives
    it and kept in ``namespace`` (the package's globals), so later lookups skip this."""
    module = exports.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, package), name)
    namespace[name] = value
    return value
