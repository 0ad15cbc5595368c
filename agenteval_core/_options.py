"""Keyword options defined once as a ``TypedDict`` and unpacked into the sync and async
drivers that share them (``replay`` / ``areplay``, ``EvalSuite.run`` / ``arun``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["check_options"]


def check_options(given: Mapping[str, Any], allowed: type, where: str) -> None:
    """Refuse keywords ``allowed`` (a ``TypedDict``) does not define, as a signature would:
    a misspelt option must not be ignored."""
    unknown = sorted(set(given) - set(allowed.__annotations__))
    if unknown:
        raise TypeError(
            f"{where}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
            f"it takes {', '.join(sorted(allowed.__annotations__))}"
        )
