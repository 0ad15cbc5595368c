"""Running a coroutine to completion from synchronous code."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

__all__ = ["run_sync"]


def run_sync(coroutine: Any) -> Any:
    """Run a coroutine to completion from sync code, even when called inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
