"""Running a coroutine to completion from synchronous code, and waits with one deadline."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, overload

__all__ = ["close_on_this_loop", "run_sync", "time_left"]

logger = logging.getLogger("agenteval")


@overload
def time_left(timeout: float) -> Callable[[], float]: ...
@overload
def time_left(timeout: None) -> Callable[[], None]: ...
@overload
def time_left(timeout: float | None) -> Callable[[], float | None]: ...
def time_left(timeout: float | None) -> Callable[[], float | None]:
    """What is left of ``timeout`` from now, each time it is called (never below 0; ``None``
    for no limit): one deadline for several waits in a row, each getting what the earlier
    ones left."""
    if timeout is None:
        return lambda: None
    deadline = time.monotonic() + timeout
    return lambda: max(0.0, deadline - time.monotonic())


def run_sync(coroutine: Coroutine[Any, Any, Any], *, closing: Iterable[object] = ()) -> Any:
    """Run a coroutine to completion from sync code, even when called inside a running loop
    (a notebook's, an async test's): then on a thread of its own, in a copy of the caller's
    context (its ``session(...)``).

    It runs on an event loop of its own, which ends with it: what ``closing`` (judges)
    opened on that loop, their connections, is closed first (see
    :func:`close_on_this_loop`), where it would otherwise stay open until collected."""
    owners = list(closing)
    run = _then_close(coroutine, owners) if owners else coroutine
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run)
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(context.run, asyncio.run, run).result()


async def _then_close(coroutine: Coroutine[Any, Any, Any], owners: list[object]) -> Any:
    try:
        return await coroutine
    finally:
        await close_on_this_loop(owners)


async def close_on_this_loop(owners: Iterable[object]) -> None:
    """Await each distinct owner's ``aclose()``, which closes what it opened on the running
    event loop (a judge's HTTP connections); owners without one are passed over. Never
    raises: a judge used again opens new connections."""
    for owner in {id(owner): owner for owner in owners if owner is not None}.values():
        aclose = getattr(owner, "aclose", None)
        if aclose is None:
            continue
        try:
            await aclose()
        except Exception as exc:
            logger.debug("closing %r's connections failed: %s", owner, exc)
