"""Prices of judge models, to put a cost on every judged result."""

from __future__ import annotations

__all__ = ["DEFAULT_PRICES", "cost_usd"]

DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    # reasoning models: their reasoning tokens are billed as output tokens, which the
    # usage's completion_tokens count
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
}
"""USD per million (input, output) tokens for a few well-known models. Prices change:
pass your own table with ``prices={"model": (input_per_million, output_per_million)}``."""


def cost_usd(
    model: str, input_tokens: int, output_tokens: int, prices: dict[str, tuple[float, float]]
) -> float | None:
    """Cost of one call, or ``None`` when the model has no price (never a made-up 0)."""
    price = prices.get(model)
    if price is None:
        return None
    return (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000
