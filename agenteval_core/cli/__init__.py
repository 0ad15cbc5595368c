"""The ``agenteval`` command line."""

from __future__ import annotations

from ._main import cli, main

__all__ = ["cli", "main"]
