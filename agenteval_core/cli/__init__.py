"""The ``agenteval`` command line."""

from __future__ import annotations

from . import _regressions  # noqa: F401  (registers `cases` and `suite` on the group)
from ._main import cli, main

__all__ = ["cli", "main"]
