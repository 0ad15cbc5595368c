"""The built-in metrics. Importing this package registers every one of them."""

from __future__ import annotations

__all__: list[str] = []
