"""Prices of judge models, to put a cost on every judged result."""

from __future__ import annotations

__all__ = ["DEFAULT_PRICES", "Price", "cost_usd"]

Price = tuple[float, float] | tuple[float, float, float]
"""USD per million tokens: (input, output), or (input, output, cached input) for a provider
that bills the prompt tokens it read from its cache at a lower rate."""

DEFAULT_PRICES: dict[str, Price] = {
    # (input, output, cached input): OpenAI reads a repeated prompt prefix of 1024 tokens or
    # more from its cache (a re-ask repeats the whole request before it; a long trace judged
    # again repeats itself)
    "gpt-4o": (2.50, 10.00, 1.25),
    "gpt-4o-mini": (0.15, 0.60, 0.075),
    "gpt-4.1": (2.00, 8.00, 0.50),
    "gpt-4.1-mini": (0.40, 1.60, 0.10),
    "gpt-4.1-nano": (0.10, 0.40, 0.025),
    # reasoning models: their reasoning tokens are billed as output tokens, which the
    # usage's completion_tokens count
    "gpt-5": (1.25, 10.00, 0.125),
    "gpt-5-mini": (0.25, 2.00, 0.025),
    "gpt-5-nano": (0.05, 0.40, 0.005),
    "o3": (2.00, 8.00, 0.50),
    "o4-mini": (1.10, 4.40, 0.275),
}
"""USD per million (input, output, cached input) tokens for a few well-known models. Prices
change: pass your own table with ``prices={"model": (input_per_million,
output_per_million)}``, with a third figure for cached input tokens where the provider bills
them apart."""


def cost_usd(
    model: str,
    input_tokens: int,
    output_tokens: int,
    prices: dict[str, Price],
    cached_input_tokens: int = 0,
) -> float | None:
    """Cost of one call, or ``None`` when the model has no price (never a made-up 0).
    ``cached_input_tokens`` are the part of ``input_tokens`` the provider read from its prompt
    cache: billed at the model's cached-input price, or at its input price when it has none."""
    price = prices.get(model)
    if price is None:
        return None
    cached = min(max(cached_input_tokens, 0), input_tokens)
    cached_price = price[2] if len(price) > 2 else price[0]
    return (
        (input_tokens - cached) * price[0] + cached * cached_price + output_tokens * price[1]
    ) / 1_000_000
