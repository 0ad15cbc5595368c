"""One place that renews what a child process needs after ``fork()``.

The child of a fork has only the thread that forked, and a copy of every lock as it stood:
one held by a parent thread at that moment stays held for ever. Objects that own threads,
locks or open files register here, and each is renewed in the child.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["renew_after_fork"]


class _ForkAware(Protocol):
    def _after_fork(self) -> None: ...


_owners: weakref.WeakSet[_ForkAware] = weakref.WeakSet()


def renew_after_fork(owner: _ForkAware) -> None:
    """Call ``owner._after_fork()`` in the child after each ``fork()`` while ``owner`` lives:
    there it starts its threads again and replaces its locks (and files it writes under a
    lock of the whole file)."""
    _owners.add(owner)


def _renew_in_child() -> None:
    for owner in list(_owners):
        owner._after_fork()


os.register_at_fork(after_in_child=_renew_in_child)
