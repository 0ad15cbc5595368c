"""An on-disk (SQLite) cache of judge replies."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .._errors import JudgeConfigError

__all__ = ["JudgeCache", "cache_key", "default_cache_path"]

logger = logging.getLogger("agenteval")


def default_cache_path() -> Path:
    """``$AGENTEVAL_CACHE_DIR/judge.sqlite``, else ``~/.cache/agenteval/judge.sqlite``."""
    root = os.environ.get("AGENTEVAL_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "agenteval"
    return base / "judge.sqlite"


def cache_key(*parts: Any) -> str:
    """sha256 of the parts as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class JudgeCache:
    """Replies keyed by judge model, metric, prompt version and the canonical request.

    A hit makes no call. Safe to share between threads; WAL mode lets several processes
    read while one writes. Judges use :meth:`aget` and :meth:`aput`, which run SQLite on a
    worker thread: a commit waits on the disk, and on the event loop it would stall every
    judge call in flight. Those forms never fail a result: a read the database refuses
    (another process holding its lock past the 5 s wait, a damaged or unwritable file) is a
    miss, and a write it refuses is left out; each is counted in ``errors`` and the first
    is logged. The blocking :meth:`get` and :meth:`put` raise as SQLite does.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_cache_path()
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # with WAL, NORMAL syncs at checkpoints, not on every commit: a power cut may
            # lose the last replies (a cache: they are asked again), never the file
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
        except (OSError, sqlite3.Error) as exc:  # a read-only home in a container, say
            cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise JudgeConfigError(
                f"the judge cache {self.path} cannot be opened ({cause}): set "
                "AGENTEVAL_CACHE_DIR to a writable directory, or judge without a cache "
                "(--no-cache, cache=None)"
            ) from exc
        self.hits = 0
        self.misses = 0
        self.errors = 0
        """Reads and writes of :meth:`aget`, :meth:`aput` and their batch forms the database
        refused (the answers were asked of the judge, or not kept)."""

    def get(self, key: str) -> dict[str, Any] | None:
        """The value stored under ``key`` (counted in ``hits``), else ``None`` (counted in
        ``misses``)."""
        with self._lock:
            row = self._db.execute("SELECT value FROM replies WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        value: dict[str, Any] = json.loads(row[0])
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Store ``value`` (JSON) under ``key``, replacing what was there."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO replies (key, value) VALUES (?, ?)",
                (key, json.dumps(value, default=str)),
            )

    def get_many(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The cached values of ``keys`` that have one."""
        return {key: value for key in keys if (value := self.get(key)) is not None}

    def put_many(self, values: Mapping[str, dict[str, Any]]) -> None:
        """Store several values in one transaction (one commit for a batch)."""
        rows = [(key, json.dumps(value, default=str)) for key, value in values.items()]
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO replies (key, value) VALUES (?, ?)", rows
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    async def aget(self, key: str) -> dict[str, Any] | None:
        """:meth:`get` on a worker thread; a read the database refuses is a miss."""
        found = await self._unfailing(self.get, key)
        return found if isinstance(found, dict) else None

    async def aput(self, key: str, value: dict[str, Any]) -> None:
        """:meth:`put` on a worker thread; a write the database refuses is left out."""
        await self._unfailing(self.put, key, value)

    async def aget_many(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """:meth:`get_many` on a worker thread; a read the database refuses finds none."""
        found = await self._unfailing(self.get_many, list(keys))
        return found if isinstance(found, dict) else {}

    async def aput_many(self, values: Mapping[str, dict[str, Any]]) -> None:
        """:meth:`put_many` on a worker thread; a write the database refuses is left out."""
        await self._unfailing(self.put_many, dict(values))

    async def _unfailing(self, call: Any, *arguments: Any) -> Any:
        """``call(*arguments)`` on a worker thread, or ``None`` when SQLite refuses it: a
        cache that cannot be read or written costs calls, never a result."""
        try:
            return await asyncio.to_thread(call, *arguments)
        except sqlite3.Error as exc:
            self.errors += 1
            if self.errors == 1:
                logger.warning(
                    "agenteval: judge cache %s: %s; answers go on being asked of the judge "
                    "and those it cannot keep are left out (further refusals are counted in "
                    "the cache's errors, not logged)",
                    self.path,
                    exc,
                )
            return None

    def clear(self) -> int:
        """Delete every cached reply; returns how many there were."""
        with self._lock:
            count = self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]
            self._db.execute("DELETE FROM replies")
        return int(count)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0])

    def close(self) -> None:
        """Close the database; the cache is unusable after."""
        with self._lock:
            self._db.close()

    # sent to another process (a replay worker, a Ray actor) as its path: each process opens
    # its own connection to the same file
    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]
